/*
 * sbx-blkbench: a mini fio for the guest side of bench/virtio (static, libc
 * only). Every I/O is O_DIRECT, synchronous, one at a time (queue depth 1),
 * so the guest's page cache plays no part and per-request cost shows.
 *
 *   sbx-blkbench seqread  DEV BLOCK_KIB MIB      read the first MIB MiB
 *   sbx-blkbench seqwrite DEV BLOCK_KIB MIB      write them (pseudo-random bytes)
 *   sbx-blkbench randread DEV BLOCK_KIB SECONDS  read aligned random blocks
 *
 * Prints one line:
 *   SBX-BENCH: <mode> bs=B ops=N bytes=N seconds=T MBps=X iops=Y
 * (MB = 10^6 bytes). Exit 0, or 1 on any I/O error (reported on stderr).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

static const char *prog = "sbx-blkbench";

static void die(const char *what) {
    fprintf(stderr, "%s: %s: %s\n", prog, what, strerror(errno));
    exit(1);
}

static uint64_t parse_u64(const char *s, const char *what) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || end == s || *end || v == 0) {
        fprintf(stderr, "%s: bad %s: %s\n", prog, what, s);
        exit(2);
    }
    return v;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* xorshift64*: random block numbers, deterministic per run. */
static uint64_t rnd(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1DULL;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s seqread|seqwrite DEV BLOCK_KIB MIB\n"
                        "       %s randread DEV BLOCK_KIB SECONDS\n", prog, prog);
        return 2;
    }
    const char *mode = argv[1], *dev = argv[2];
    size_t bs = (size_t)parse_u64(argv[3], "BLOCK_KIB") * 1024;
    uint64_t amount = parse_u64(argv[4], "MIB or SECONDS");
    int write_mode = !strcmp(mode, "seqwrite");
    int random_mode = !strcmp(mode, "randread");
    if (!write_mode && !random_mode && strcmp(mode, "seqread")) {
        fprintf(stderr, "%s: unknown mode %s\n", prog, mode);
        return 2;
    }

    int fd = open(dev, (write_mode ? O_WRONLY : O_RDONLY) | O_DIRECT | O_CLOEXEC);
    if (fd < 0) die(dev);
    uint64_t size;
    if (ioctl(fd, BLKGETSIZE64, &size) < 0) {
        off_t end = lseek(fd, 0, SEEK_END); /* a regular file, for trying it out */
        if (end < 0) die("size of the device");
        size = (uint64_t)end;
    }
    void *buf;
    if (posix_memalign(&buf, 4096, bs)) die("posix_memalign");
    /* Not zeros: a backend must not be able to shortcut anything. */
    uint64_t fill = 0x5eed;
    for (size_t i = 0; i + 8 <= bs; i += 8) {
        uint64_t v = rnd(&fill);
        memcpy((char *)buf + i, &v, 8);
    }

    uint64_t ops = 0, bytes = 0;
    double start = now(), end;
    if (random_mode) {
        uint64_t blocks = size / bs, state = 0x9E3779B97F4A7C15ULL;
        if (blocks == 0) {
            fprintf(stderr, "%s: %s is smaller than one block\n", prog, dev);
            return 1;
        }
        double deadline = start + (double)amount;
        for (;;) {
            off_t off = (off_t)((rnd(&state) % blocks) * bs);
            ssize_t r = pread(fd, buf, bs, off);
            if (r != (ssize_t)bs) {
                if (r >= 0) errno = EIO;
                die("pread");
            }
            ops++;
            bytes += bs;
            /* The clock is read every 64 requests: cheap next to an exit. */
            if ((ops & 63) == 0 && now() >= deadline) break;
        }
    } else {
        uint64_t total = amount * 1024 * 1024;
        if (total > size) {
            fprintf(stderr, "%s: %s has only %" PRIu64 " bytes\n", prog, dev, size);
            return 1;
        }
        for (uint64_t off = 0; off < total; off += bs) {
            size_t n = total - off < bs ? (size_t)(total - off) : bs;
            ssize_t r = write_mode ? pwrite(fd, buf, n, (off_t)off) : pread(fd, buf, n, (off_t)off);
            if (r != (ssize_t)n) {
                if (r >= 0) errno = EIO;
                die(write_mode ? "pwrite" : "pread");
            }
            ops++;
            bytes += n;
        }
        if (write_mode && fdatasync(fd) < 0) die("fdatasync");
    }
    end = now();
    double secs = end - start;
    printf("SBX-BENCH: blk-%s bs=%zu ops=%" PRIu64 " bytes=%" PRIu64
           " seconds=%.6f MBps=%.2f iops=%.1f\n",
           mode, bs, ops, bytes, secs, (double)bytes / 1e6 / secs, (double)ops / secs);
    close(fd);
    free(buf);
    return 0;
}
