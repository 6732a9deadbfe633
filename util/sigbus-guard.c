/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * SIGBUS guard: see include/qemu/sigbus-guard.h.
 *
 * The handler must be async-signal-safe: it only reads the slot table
 * with atomic loads and calls mmap(), which is a plain system call.
 * Writers (add/remove) serialise on a mutex among themselves; a slot is
 * published by storing its start last and retired by clearing its start
 * first, so the handler never sees a half-written slot as live.
 */
#include "qemu/osdep.h"
#include "qemu/sigbus-guard.h"

#include <signal.h>
#include <sys/mman.h>

#define SIGBUS_GUARD_SLOTS 1024

typedef struct GuardSlot {
    _Atomic uintptr_t start;    /* 0: free */
    _Atomic uintptr_t end;
    _Atomic bool *_Atomic flag;
} GuardSlot;

static GuardSlot slots[SIGBUS_GUARD_SLOTS];
static GMutex slots_lock;
static uintptr_t page_size;
static struct sigaction old_action;

/* Replace the page (or huge page) holding @addr with private zeroes.
 * Huge-page mappings cannot be split, so try the larger sizes too. */
static bool sigbus_zero_page(uintptr_t addr, uintptr_t start, uintptr_t end)
{
    static const uintptr_t sizes[] = { 0, 2UL << 20, 1UL << 30 };

    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        uintptr_t sz = sizes[i] ? sizes[i] : page_size;
        uintptr_t p = addr & ~(sz - 1);

        if (p < start || p + sz > end) {
            continue;
        }
        if (mmap((void *)p, sz, PROT_READ | PROT_WRITE,
                 MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) != MAP_FAILED) {
            return true;
        }
    }
    return false;
}

static void sigbus_handler(int sig, siginfo_t *si, void *uctx)
{
    uintptr_t addr = (uintptr_t)si->si_addr;

    if (si->si_code > 0) {      /* raised by a fault, not by kill() */
        for (unsigned int i = 0; i < SIGBUS_GUARD_SLOTS; i++) {
            uintptr_t start = atomic_load_explicit(&slots[i].start,
                                                   memory_order_acquire);
            uintptr_t end;
            _Atomic bool *flag;

            if (!start || addr < start) {
                continue;
            }
            end = atomic_load_explicit(&slots[i].end, memory_order_relaxed);
            if (addr >= end) {
                continue;
            }
            flag = atomic_load_explicit(&slots[i].flag, memory_order_relaxed);
            if (sigbus_zero_page(addr, start, end)) {
                atomic_store_explicit(flag, true, memory_order_release);
                return;         /* the access is retried on the zero page */
            }
            break;
        }
    }
    /* Not ours: the action that was there before, usually death. */
    sigaction(SIGBUS, &old_action, NULL);
    if (si->si_code <= 0) {
        raise(sig);
    }
    /* a fault: returning re-executes the access under the old action */
}

bool sigbus_guard_install(GError **errp)
{
    static gsize done;
    static bool ok;
    static int saved_errno;

    if (g_once_init_enter(&done)) {
        struct sigaction sa = { 0 };

        page_size = (uintptr_t)sysconf(_SC_PAGESIZE);
        sa.sa_sigaction = sigbus_handler;
        sa.sa_flags = SA_SIGINFO | SA_NODEFER;
        sigemptyset(&sa.sa_mask);
        ok = sigaction(SIGBUS, &sa, &old_action) == 0;
        saved_errno = errno;
        g_once_init_leave(&done, 1);
    }
    if (!ok) {
        g_set_error(errp, VB_ERROR, 0, "cannot install the SIGBUS handler: %s",
                    g_strerror(saved_errno));
    }
    return ok;
}

int sigbus_guard_add(void *addr, size_t len, _Atomic bool *flag)
{
    uintptr_t end = (uintptr_t)addr + len;
    int handle = -1;

    if (!len || !page_size) {
        return -1;
    }
    /* A mapping, and so a fault, covers whole pages: a range ending inside
     * a page guards all of it (sigbus_zero_page() replaces whole pages
     * and refuses one that reaches past the end). */
    end = (end + page_size - 1) & ~(page_size - 1);
    g_mutex_lock(&slots_lock);
    for (unsigned int i = 0; i < SIGBUS_GUARD_SLOTS; i++) {
        if (!atomic_load_explicit(&slots[i].start, memory_order_relaxed)) {
            atomic_store_explicit(&slots[i].flag, flag, memory_order_relaxed);
            atomic_store_explicit(&slots[i].end, end, memory_order_relaxed);
            atomic_store_explicit(&slots[i].start, (uintptr_t)addr,
                                  memory_order_release);
            handle = (int)i;
            break;
        }
    }
    g_mutex_unlock(&slots_lock);
    return handle;
}

void sigbus_guard_remove(int handle)
{
    if (handle < 0 || handle >= SIGBUS_GUARD_SLOTS) {
        return;
    }
    g_mutex_lock(&slots_lock);
    atomic_store_explicit(&slots[handle].start, 0, memory_order_release);
    g_mutex_unlock(&slots_lock);
}
