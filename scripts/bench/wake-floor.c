/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The least a back-end can spend per request of a sleeping client at a
 * fixed rate.  The "daemon" (this process) sleeps in epoll_wait() on the
 * kick eventfd (edge-triggered, so it never reads it) and on each wake-up
 * writes the call eventfd; the "client" (a child process, as a VM's vCPU
 * thread is another process than the back-end) kicks at a fixed rate and
 * sleeps in read() on the call eventfd between requests.  No virtqueue, no
 * request: what is left is the kernel's sleep, wake-up and eventfd cost,
 * which every back-end that sleeps between kicks pays.
 *
 * Usage: wake-floor RATE SECONDS
 * Prints one JSON line: round trips, the daemon's voluntary context
 * switches, its CPU time, and its CPU time per round trip (us).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(clockid_t c)
{
    struct timespec ts;

    clock_gettime(c, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The client: a kick every 1/rate s (open loop), then sleep until called. */
static int client(int kick_fd, int call_fd, double rate, double secs)
{
    double period = 1.0 / rate, next = now_s(CLOCK_MONOTONIC), end;
    uint64_t v, one = 1;

    end = next + secs;
    while (next < end) {
        if (now_s(CLOCK_MONOTONIC) < next) {
            struct timespec ts = { .tv_sec = (time_t)next,
                .tv_nsec = (long)((next - (time_t)next) * 1e9) };

            clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
        }
        if (write(kick_fd, &one, sizeof(one)) != sizeof(one) ||
            read(call_fd, &v, sizeof(v)) != sizeof(v)) {
            perror("wake-floor: client");
            return 1;
        }
        next += period;
    }
    return 0;
}

int main(int argc, char **argv)
{
    struct epoll_event ev = { .events = EPOLLIN | EPOLLET };
    struct rusage ru0, ru1;
    double rate = 0, secs = 0, c0, cpu;
    long trips = 0;
    uint64_t one = 1;
    int kick_fd, call_fd, ep, status;
    pid_t pid;

    if (argc == 3) {
        rate = atof(argv[1]);
        secs = atof(argv[2]);
    }
    if (rate <= 0 || secs <= 0) {
        fprintf(stderr, "usage: wake-floor RATE SECONDS (both > 0)\n");
        return 2;
    }
    kick_fd = eventfd(0, EFD_NONBLOCK);
    call_fd = eventfd(0, 0);
    ep = epoll_create1(0);
    if (kick_fd < 0 || call_fd < 0 || ep < 0 ||
        epoll_ctl(ep, EPOLL_CTL_ADD, kick_fd, &ev) < 0) {
        perror("wake-floor: eventfd/epoll");
        return 1;
    }
    pid = fork();
    if (pid < 0) {
        perror("wake-floor: fork");
        return 1;
    }
    if (pid == 0) {
        _exit(client(kick_fd, call_fd, rate, secs));
    }
    getrusage(RUSAGE_THREAD, &ru0);
    c0 = now_s(CLOCK_THREAD_CPUTIME_ID);
    for (;;) {
        int n = epoll_wait(ep, &ev, 1, 100);

        if (n < 0 && errno != EINTR) {
            perror("wake-floor: epoll_wait");
            kill(pid, SIGKILL);
            return 1;
        }
        if (n > 0) {
            trips++;
            if (write(call_fd, &one, sizeof(one)) != sizeof(one)) {
                perror("wake-floor: write");
                kill(pid, SIGKILL);
                return 1;
            }
        } else if (waitpid(pid, &status, WNOHANG) == pid) {
            break;
        }
    }
    cpu = now_s(CLOCK_THREAD_CPUTIME_ID) - c0;
    getrusage(RUSAGE_THREAD, &ru1);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "wake-floor: the client failed\n");
        return 1;
    }
    printf("{\"rate\": %.0f, \"seconds\": %.1f, \"round_trips\": %ld, "
           "\"daemon_vcsw\": %ld, \"daemon_cpu_s\": %.6f, "
           "\"daemon_us_per_trip\": %.3f}\n",
           rate, secs, trips, (long)(ru1.ru_nvcsw - ru0.ru_nvcsw), cpu,
           trips ? cpu * 1e6 / trips : 0.0);
    return 0;
}
