// emm_torch_alloc / emm_torch_free called from C, as PyTorch's pluggable allocator calls them:
// ns per allocation and its free, one at a time and 64 live at once.
//
//   cargo build --release -p emm-capi
//   cc -O2 benchmarks/scripts/torch_hooks_loop.c -L target/release -lemm \
//      -Wl,-rpath,$PWD/target/release -o torch_hooks_loop
//   ./torch_hooks_loop 2000000                     # on a GPU
//   EMM_BACKEND=sim ./torch_hooks_loop 2000000     # on the simulated GPU
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>
#include <time.h>
void *emm_torch_alloc(ssize_t size, int device, void *stream);
void emm_torch_free(void *ptr, ssize_t size, int device, void *stream);
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000000;
    ssize_t sizes[8] = {512, 4096, 65536, 1 << 20, 3 << 20, 256, 12345, 8 << 20};
    for (int i = 0; i < 1000; i++) emm_torch_free(emm_torch_alloc(sizes[i & 7], 0, 0), sizes[i & 7], 0, 0);
    double t = now();
    for (long i = 0; i < n; i++) { void *p = emm_torch_alloc(sizes[i & 7], 0, 0); emm_torch_free(p, sizes[i & 7], 0, 0); }
    double pair = (now() - t) / n * 1e9;
    void *ps[64];
    t = now();
    for (long r = 0; r < n / 64; r++) {
        for (int i = 0; i < 64; i++) ps[i] = emm_torch_alloc(sizes[(r + i) & 7], 0, 0);
        for (int i = 63; i >= 0; i--) emm_torch_free(ps[i], sizes[(r + i) & 7], 0, 0);
    }
    double batch = (now() - t) / (n / 64 * 64) * 1e9;
    printf("{\"capi_alloc_free_pair_ns\": %.1f, \"capi_batch64_pair_ns\": %.1f}\n", pair, batch);
    return 0;
}
