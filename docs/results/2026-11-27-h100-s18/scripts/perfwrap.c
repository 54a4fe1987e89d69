// Counts cycles, instructions, branch misses, L1D read misses of a child command (perf_event_open).
#define _GNU_SOURCE
#include <linux/perf_event.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <stdio.h>
#include <string.h>
#include <stdint.h>
#include <time.h>
static int open_ev(uint32_t type, uint64_t config, pid_t pid) {
  struct perf_event_attr a; memset(&a, 0, sizeof a);
  a.size = sizeof a; a.type = type; a.config = config;
  a.disabled = 1; a.enable_on_exec = 1; a.inherit = 1; a.exclude_kernel = 1; a.exclude_hv = 1;
  return syscall(SYS_perf_event_open, &a, pid, -1, -1, 0);
}
int main(int argc, char **argv) {
  int go[2]; pipe(go);
  pid_t pid = fork();
  if (pid == 0) { char c; close(go[1]); read(go[0], &c, 1); execvp(argv[1], argv + 1); _exit(127); }
  close(go[0]);
  uint64_t cfg[5][2] = {{PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES}, {PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS},
    {PERF_TYPE_HARDWARE, PERF_COUNT_HW_BRANCH_MISSES},
    {PERF_TYPE_HW_CACHE, PERF_COUNT_HW_CACHE_L1D | (PERF_COUNT_HW_CACHE_OP_READ << 8) | (PERF_COUNT_HW_CACHE_RESULT_MISS << 16)},
    {PERF_TYPE_HARDWARE, PERF_COUNT_HW_REF_CPU_CYCLES}};
  const char *name[5] = {"cycles", "instructions", "branch-misses", "l1d-read-misses", "ref-cycles"};
  int fd[5];
  for (int k = 0; k < 5; k++) fd[k] = open_ev(cfg[k][0], cfg[k][1], pid);
  struct timespec t0, t1; clock_gettime(CLOCK_MONOTONIC, &t0);
  write(go[1], "x", 1); close(go[1]);
  int st; waitpid(pid, &st, 0);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double s = (t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec);
  for (int k = 0; k < 5; k++) {
    uint64_t v = 0;
    if (fd[k] < 0 || read(fd[k], &v, 8) != 8) fprintf(stderr, "%s -1\n", name[k]);
    else fprintf(stderr, "%s %llu\n", name[k], (unsigned long long)v);
  }
  fprintf(stderr, "seconds %.6f\n", s);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}
