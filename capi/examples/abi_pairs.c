/* The cost of one allocation and one free through emm's C ABI: 200 000 pairs over 64 live
 * slots, 256 B to 32 KiB, through emm_alloc/emm_free and through the PyTorch pair.
 *
 *   cargo build --release -p emm-capi
 *   cc -O2 -std=gnu11 -I capi/include capi/examples/abi_pairs.c -L target/release -lemm -o abi_pairs
 *   EMM_BACKEND=sim LD_LIBRARY_PATH=target/release ./abi_pairs      # or on a GPU: EMM_BACKEND=cuda
 */
#include <stdio.h>
#include <time.h>
#include "emm.h"

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(void) {
    enum { N = 200000, SLOTS = 64 };
    void *p[SLOTS];
    for (int round = 0; round < 2; round++) {
        double t0 = now_ns();
        for (int i = 0; i < N; i++) {
            int k = i % SLOTS;
            if (i >= SLOTS && emm_free(p[k], NULL) != EMM_STATUS_OK) return 1;
            if (emm_alloc((size_t)256 << (i % 8), 0, NULL, &p[k]) != EMM_STATUS_OK) {
                fprintf(stderr, "%s\n", emm_last_error_message());
                return 1;
            }
        }
        for (int k = 0; k < SLOTS; k++) emm_free(p[k], NULL);
        double t1 = now_ns();
        for (int i = 0; i < N; i++) {
            int k = i % SLOTS;
            if (i >= SLOTS) emm_torch_free(p[k], 0, 0, NULL);
            p[k] = emm_torch_alloc((ssize_t)256 << (i % 8), 0, NULL);
            if (p[k] == NULL) return 2;
        }
        for (int k = 0; k < SLOTS; k++) emm_torch_free(p[k], 0, 0, NULL);
        double t2 = now_ns();
        printf("round %d: emm_alloc+emm_free %.0f ns/pair, emm_torch_alloc+emm_torch_free %.0f ns/pair\n",
               round, (t1 - t0) / N, (t2 - t1) / N);
    }
    return 0;
}
