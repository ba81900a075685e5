/*
 * sbx-hostile: a guest that attacks its own virtio-mmio devices (static,
 * libc only; run as root in a test guest). For the VMM, the guest is
 * hostile: every register write and every descriptor chain here is one a
 * buggy or malicious driver could make, and the VMM must survive them all
 * with at most the device set to DEVICE_NEEDS_RESET (virtio 1.2 §2.1.2).
 *
 *   sbx-hostile [--rounds N] [--seed S] [--done-to PATH] DEVICE...
 *       DEVICE: rng, net, blk, vsock; PATH (opened first, e.g. /dev/ttyS0)
 *       gets "SBX-HOSTILE: done" at the end, for when stdout went with
 *       the device attacked (vsock) and files with the disk (blk).
 *
 * The devices come from the kernel command line (virtio_mmio.device=
 * SIZE@BASE:IRQ, which sbx-vmm writes) and their DeviceID register; their
 * registers are reached through /dev/mem (the guest kernel has no
 * IO_STRICT_DEVMEM), the rings live in locked pages of this process whose
 * guest-physical addresses come from /proc/self/pagemap. The guest's own
 * driver stays bound and loses the device: attack only what the test can
 * spare. For each device:
 *   1. N writes of random widths and values to random registers, reads of
 *      every register between them (virtio 1.2 §4.2.2);
 *   2. the device set up by the book (§3.1.1) on rings of ours, then one
 *      hostile chain per case below, each followed by a notify and a
 *      reset: a descriptor loop, a chain longer than the queue, a buffer
 *      outside guest memory, a length of 4 GiB - 1, an indirect table
 *      inside an indirect table, an indirect table of odd length, a head
 *      past the queue, an avail index a thousand ahead, rings outside
 *      guest memory;
 *   3. N resets each followed by DRIVER_OK without FEATURES_OK (§3.1.1), a
 *      mistake the VMM may warn about, but not N times.
 * One line per device and case: "SBX-HOSTILE: DEV CASE status=0xSS", the
 * device status read back after the notify; exit 0 once every case has
 * run (what the VMM did is for the test to judge), 1 when the attack
 * itself could not be set up.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static const char *prog = "sbx-hostile";

static void die(const char *what) {
    fprintf(stderr, "%s: %s: %s\n", prog, what, strerror(errno));
    exit(1);
}

/* virtio 1.2 §4.2.2: MMIO device register layout (version 2). */
enum {
    R_MAGIC = 0x000, R_VERSION = 0x004, R_DEVICE_ID = 0x008, R_DEVICE_FEATURES = 0x010,
    R_DEVICE_FEATURES_SEL = 0x014, R_DRIVER_FEATURES = 0x020, R_DRIVER_FEATURES_SEL = 0x024,
    R_QUEUE_SEL = 0x030, R_QUEUE_NUM_MAX = 0x034, R_QUEUE_NUM = 0x038, R_QUEUE_READY = 0x044,
    R_QUEUE_NOTIFY = 0x050, R_INTERRUPT_STATUS = 0x060, R_INTERRUPT_ACK = 0x064, R_STATUS = 0x070,
    R_QUEUE_DESC_LOW = 0x080, R_QUEUE_DESC_HIGH = 0x084, R_QUEUE_DRIVER_LOW = 0x090,
    R_QUEUE_DRIVER_HIGH = 0x094, R_QUEUE_DEVICE_LOW = 0x0a0, R_QUEUE_DEVICE_HIGH = 0x0a4,
    R_CONFIG_GENERATION = 0x0fc, R_CONFIG = 0x100,
};
/* §2.1: device status bits. */
enum { S_ACKNOWLEDGE = 1, S_DRIVER = 2, S_DRIVER_OK = 4, S_FEATURES_OK = 8, S_NEEDS_RESET = 0x40 };
/* §2.7.5: descriptor flags. */
enum { F_NEXT = 1, F_WRITE = 2, F_INDIRECT = 4 };

struct desc {
    uint64_t addr;
    uint32_t len;
    uint16_t flags;
    uint16_t next;
};

static volatile uint8_t *regs;

static uint32_t rd(unsigned off) { return *(volatile uint32_t *)(regs + off); }
static void wr(unsigned off, uint32_t v) { *(volatile uint32_t *)(regs + off) = v; }

static uint64_t rng_state;
static uint64_t next_random(void) { /* xorshift64* */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1DULL;
}

static void pause_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* A locked, zeroed page of ours and its guest-physical address. */
struct page {
    uint8_t *p;
    uint64_t phys;
};

static struct page locked_page(int pagemap) {
    struct page pg;
    pg.p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE | MAP_LOCKED, -1, 0);
    if (pg.p == MAP_FAILED) die("mmap a ring page");
    memset(pg.p, 0, 4096);
    uint64_t entry;
    /* Documentation/admin-guide/mm/pagemap.rst: bit 63 present, 0-54 PFN. */
    if (pread(pagemap, &entry, sizeof entry, (off_t)((uintptr_t)pg.p / 4096) * 8) != (ssize_t)sizeof entry)
        die("read /proc/self/pagemap");
    if (!(entry >> 63) || (entry & ((1ULL << 55) - 1)) == 0) {
        fprintf(stderr, "%s: no physical address for a ring page (not root?)\n", prog);
        exit(1);
    }
    pg.phys = (entry & ((1ULL << 55) - 1)) * 4096;
    return pg;
}

static const char *kind_name(uint32_t id) {
    switch (id) {
    case 1: return "net";
    case 2: return "blk";
    case 4: return "rng";
    case 19: return "vsock";
    default: return "?";
    }
}

/* Register storm: random widths, offsets and values, every register read
 * between. Not QueueReady or the ring addresses: a queue made ready at a
 * random address inside guest memory has the device write the guest's own
 * memory, which is the guest's loss, not the VMM's (the chains below put
 * rings outside memory on purpose). */
static void storm(unsigned rounds) {
    for (unsigned i = 0; i < rounds; ++i) {
        uint64_t r = next_random();
        unsigned off = (unsigned)(r % 0x200);
        if ((off >= R_QUEUE_READY && off < R_QUEUE_READY + 4) ||
            (off >= R_QUEUE_DESC_LOW - 7 && off < R_QUEUE_DEVICE_HIGH + 4)) {
            continue;
        }
        uint32_t value = (uint32_t)(next_random());
        switch ((r >> 16) % 4) {
        case 0: *(volatile uint8_t *)(regs + off) = (uint8_t)value; break;
        case 1: *(volatile uint16_t *)(regs + (off & ~1u)) = (uint16_t)value; break;
        case 2: wr(off & ~3u, value); break;
        default: *(volatile uint64_t *)(regs + (off & ~7u)) = ((uint64_t)value << 32) | value; break;
        }
        if (i % 64 == 0)
            for (unsigned o = 0; o < 0x200; o += 4) (void)rd(o);
    }
    wr(R_STATUS, 0);
}

/* The queue attacked: one the device reads when notified (net and vsock:
 * transmitq, §5.1.2, §5.10.2; blk and rng: their only one). */
static unsigned queue;

/* §3.1.1 up to DRIVER_OK with `queue` on our rings; returns its size or 0. */
static unsigned setup_queue(struct page *d, struct page *a, struct page *u, int outside) {
    wr(R_STATUS, 0);
    wr(R_STATUS, S_ACKNOWLEDGE);
    wr(R_STATUS, S_ACKNOWLEDGE | S_DRIVER);
    wr(R_DEVICE_FEATURES_SEL, 0);
    uint32_t low = rd(R_DEVICE_FEATURES);
    wr(R_DEVICE_FEATURES_SEL, 1);
    uint32_t high = rd(R_DEVICE_FEATURES);
    /* VIRTIO_F_VERSION_1 (32) and, where offered, VIRTIO_F_INDIRECT_DESC
     * (28, §6): the indirect cases then reach the table parser. */
    wr(R_DRIVER_FEATURES_SEL, 0);
    wr(R_DRIVER_FEATURES, low & (1u << 28));
    wr(R_DRIVER_FEATURES_SEL, 1);
    wr(R_DRIVER_FEATURES, high & 1u);
    wr(R_STATUS, S_ACKNOWLEDGE | S_DRIVER | S_FEATURES_OK);
    if (!(rd(R_STATUS) & S_FEATURES_OK)) return 0;
    wr(R_QUEUE_SEL, queue);
    unsigned max = rd(R_QUEUE_NUM_MAX);
    if (max == 0) return 0;
    unsigned n = max < 8 ? max : 8;
    memset(d->p, 0, 4096);
    memset(a->p, 0, 4096);
    memset(u->p, 0, 4096);
    wr(R_QUEUE_NUM, n);
    wr(R_QUEUE_DESC_LOW, (uint32_t)d->phys);
    wr(R_QUEUE_DESC_HIGH, (uint32_t)(d->phys >> 32));
    wr(R_QUEUE_DRIVER_LOW, (uint32_t)a->phys);
    wr(R_QUEUE_DRIVER_HIGH, (uint32_t)(a->phys >> 32));
    wr(R_QUEUE_DEVICE_LOW, (uint32_t)u->phys);
    wr(R_QUEUE_DEVICE_HIGH, (uint32_t)(u->phys >> 32));
    if (outside) { /* 2^64 - 4 GiB and up: no guest has memory there */
        wr(R_QUEUE_DESC_HIGH, 0xffffffffu);
        wr(R_QUEUE_DRIVER_HIGH, 0xffffffffu);
        wr(R_QUEUE_DEVICE_HIGH, 0xffffffffu);
    }
    wr(R_QUEUE_READY, 1);
    wr(R_STATUS, S_ACKNOWLEDGE | S_DRIVER | S_FEATURES_OK | S_DRIVER_OK);
    return n;
}

/* Publishes head `head` with avail.idx `idx` (§2.7.6) and notifies. */
static void publish(struct page *a, uint16_t head, uint16_t idx) {
    volatile uint16_t *avail = (volatile uint16_t *)a->p;
    avail[2] = head; /* ring[0] */
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    avail[1] = idx;
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    wr(R_QUEUE_NOTIFY, queue);
}

static const char *const cases[] = {"loop",         "too-long",        "outside-memory",  "huge-length",
                                    "nested-indirect", "odd-indirect", "head-past-queue", "avail-ahead",
                                    "rings-outside-memory"};

static void chain(const char *name, const char *kase, struct page *d, struct page *a, struct page *u,
                  struct page *ind, struct page *buf) {
    unsigned n = setup_queue(d, a, u, !strcmp(kase, "rings-outside-memory"));
    if (n == 0 || (rd(R_STATUS) & S_NEEDS_RESET)) { /* refused already (rings outside memory) */
        printf("SBX-HOSTILE: %s %s status=0x%02x%s\n", name, kase, rd(R_STATUS), n ? "" : " (no queue to attack)");
        fflush(stdout);
        wr(R_STATUS, 0);
        return;
    }
    struct desc *t = (struct desc *)d->p;
    uint16_t head = 0, idx = 1;
    for (unsigned i = 0; i < n; ++i) t[i] = (struct desc){buf->phys, 64, F_WRITE, 0};
    if (!strcmp(kase, "loop")) {
        t[0].flags = F_NEXT | F_WRITE; t[0].next = 1;
        t[1].flags = F_NEXT | F_WRITE; t[1].next = 0;
    } else if (!strcmp(kase, "too-long")) {
        for (unsigned i = 0; i < n; ++i) { t[i].flags = F_NEXT | F_WRITE; t[i].next = (uint16_t)((i + 1) % n); }
    } else if (!strcmp(kase, "outside-memory")) {
        t[0].addr = 0xfffffffff000ULL; t[0].len = 4096;
    } else if (!strcmp(kase, "huge-length")) {
        t[0].len = 0xffffffffu;
    } else if (!strcmp(kase, "nested-indirect")) {
        struct desc *it = (struct desc *)ind->p;
        it[0] = (struct desc){ind->phys, 32, F_INDIRECT, 0};
        it[1] = (struct desc){buf->phys, 64, F_WRITE, 0};
        t[0] = (struct desc){ind->phys, 32, F_INDIRECT, 0};
    } else if (!strcmp(kase, "odd-indirect")) {
        t[0] = (struct desc){ind->phys, 17, F_INDIRECT, 0};
    } else if (!strcmp(kase, "head-past-queue")) {
        head = (uint16_t)(n + 3);
    } else if (!strcmp(kase, "avail-ahead")) {
        idx = 1000;
    }
    publish(a, head, idx);
    uint32_t status = 0;
    for (int i = 0; i < 50 && !((status = rd(R_STATUS)) & S_NEEDS_RESET); ++i) pause_ms(20);
    printf("SBX-HOSTILE: %s %s status=0x%02x\n", name, kase, status);
    fflush(stdout);
    wr(R_STATUS, 0);
}

int main(int argc, char **argv) {
    unsigned rounds = 20000;
    int done_fd = -1;
    rng_state = 0x5eed;
    int i = 1;
    for (; i + 1 < argc && argv[i][0] == '-'; i += 2) {
        if (!strcmp(argv[i], "--rounds")) rounds = (unsigned)strtoul(argv[i + 1], NULL, 0);
        else if (!strcmp(argv[i], "--seed")) rng_state = strtoull(argv[i + 1], NULL, 0) | 1;
        else if (!strcmp(argv[i], "--done-to")) {
            if ((done_fd = open(argv[i + 1], O_WRONLY | O_NOCTTY | O_CLOEXEC)) < 0) die(argv[i + 1]);
        }
        else break;
    }
    if (i >= argc) {
        fprintf(stderr, "usage: %s [--rounds N] [--seed S] [--done-to PATH] rng|net|blk|vsock...\n", prog);
        return 2;
    }
    char cmdline[4096] = {0};
    FILE *f = fopen("/proc/cmdline", "r");
    if (!f || !fgets(cmdline, sizeof cmdline, f)) die("/proc/cmdline");
    fclose(f);
    int mem = open("/dev/mem", O_RDWR | O_SYNC | O_CLOEXEC);
    if (mem < 0) die("/dev/mem");
    int pagemap = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    if (pagemap < 0) die("/proc/self/pagemap");
    struct page d = locked_page(pagemap), a = locked_page(pagemap), u = locked_page(pagemap);
    struct page ind = locked_page(pagemap), buf = locked_page(pagemap);

    for (; i < argc; ++i) {
        int found = 0;
        for (char *p = strstr(cmdline, "virtio_mmio.device="); p; p = strstr(p + 1, "virtio_mmio.device=")) {
            unsigned long long base = 0;
            unsigned size_kib = 0;
            if (sscanf(p, "virtio_mmio.device=%uK@%llx", &size_kib, &base) != 2) continue;
            void *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, mem, (off_t)base);
            if (m == MAP_FAILED) die("mmap a device's registers from /dev/mem");
            regs = m;
            const char *name = kind_name(rd(R_DEVICE_ID));
            if (rd(R_MAGIC) == 0x74726976 && !strcmp(name, argv[i])) {
                found = 1;
                printf("SBX-HOSTILE: %s at 0x%llx version %u\n", name, base, rd(R_VERSION));
                fflush(stdout);
                storm(rounds);
                printf("SBX-HOSTILE: %s storm status=0x%02x (%u writes)\n", name, rd(R_STATUS), rounds);
                queue = !strcmp(name, "net") || !strcmp(name, "vsock") ? 1 : 0;
                for (unsigned c = 0; c < sizeof cases / sizeof cases[0]; ++c) chain(name, cases[c], &d, &a, &u, &ind, &buf);
                /* The same mistake over and over: each is one warning the VMM may log. */
                for (unsigned k = 0; k < rounds; ++k) {
                    wr(R_STATUS, 0);
                    wr(R_STATUS, S_DRIVER_OK);
                }
                wr(R_STATUS, 0);
                printf("SBX-HOSTILE: %s status-flood %u writes of DRIVER_OK without FEATURES_OK\n", name, rounds);
                fflush(stdout);
            }
            munmap(m, 4096);
        }
        if (!found) {
            fprintf(stderr, "%s: no %s device on the kernel command line\n", prog, argv[i]);
            return 1;
        }
    }
    if (done_fd >= 0) {
        static const char done[] = "\nSBX-HOSTILE: done\n";
        if (write(done_fd, done, sizeof done - 1) < 0) die("writing the done line");
    }
    return 0;
}
