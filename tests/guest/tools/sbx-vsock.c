/*
 * sbx-vsock: a tiny socat for AF_VSOCK, for the guest side of the virtio
 * tests and benchmark (static, no dependencies beyond libc).
 *
 *   sbx-vsock [OPTIONS] connect CID PORT   connect to CID:PORT
 *   sbx-vsock [OPTIONS] listen PORT        accept one connection on PORT
 *   sbx-vsock gen BYTES SEED               write the test stream to stdout
 *   sbx-vsock cid                          print this machine's own CID
 *
 * connect/listen copy the source (stdin by default) to the socket, then
 * shutdown(SHUT_WR), and copy the socket to the sink (stdout by default) until
 * the peer closes; they exit when both directions have ended (0 = no error).
 *
 * Options:
 *   -s SRC   what to send: "-" stdin (default), "gen:BYTES:SEED" the test
 *            stream, "zero:BYTES" zeros, "none" nothing (shut down at once)
 *   -o DST   where received bytes go: "-" stdout (default), "null" (count)
 *   -n       listen: print "SBX-VSOCK-LISTENING: PORT" on stderr once the
 *            socket listens (the host side of a test waits for that line)
 *   -k       keep the sending direction open when the source ends (no
 *            shutdown(SHUT_WR)); the receiving direction then ends the
 *            transfer. For exchanges that must not depend on half-close:
 *            the hybrid Unix-socket convention (Firecracker's) turns a host
 *            EOF into a full shutdown
 *   -r       print "SBX-VSOCK-REPORT: sent=N received=M seconds=T" on stderr
 *            (T from the established connection to the end of both
 *            directions)
 *   -w SEC   connect: retry a refused/reset connection for up to SEC seconds
 *
 * The test stream ("gen") is the little-endian 64-bit words of splitmix64
 * started at SEED, truncated to BYTES: host and guest can agree on the
 * sha256 of a 100 MiB stream without storing it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <linux/vm_sockets.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BUF_SIZE (256 * 1024)

static const char *prog = "sbx-vsock";

static void die(const char *what) {
    fprintf(stderr, "%s: %s: %s\n", prog, what, strerror(errno));
    exit(1);
}

static void usage(void) {
    fprintf(stderr,
            "usage: %s [-s SRC] [-o DST] [-k] [-r] [-w SEC] connect CID PORT\n"
            "       %s [-s SRC] [-o DST] [-k] [-r] [-n] listen PORT\n"
            "       %s gen BYTES SEED\n"
            "       %s cid\n"
            "SRC: - | gen:BYTES:SEED | zero:BYTES | none    DST: - | null\n",
            prog, prog, prog, prog);
    exit(2);
}

static uint64_t parse_u64(const char *s, const char *what) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || end == s || *end) {
        fprintf(stderr, "%s: bad %s: %s\n", prog, what, s);
        exit(2);
    }
    return v;
}

/* --- the test stream ------------------------------------------------------ */

static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* Fills buf (len a multiple of 8, except for the stream's last piece). */
static void gen_fill(uint64_t *state, unsigned char *buf, size_t len) {
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t v = splitmix64(state);
        for (int b = 0; b < 8; b++) buf[i + b] = (unsigned char)(v >> (8 * b));
    }
    if (i < len) {
        uint64_t v = splitmix64(state);
        for (int b = 0; i < len; b++, i++) buf[i] = (unsigned char)(v >> (8 * b));
    }
}

static int write_all(int fd, const unsigned char *p, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int cmd_gen(int argc, char **argv) {
    if (argc != 3) usage();
    uint64_t left = parse_u64(argv[1], "BYTES");
    uint64_t state = parse_u64(argv[2], "SEED");
    unsigned char *buf = malloc(BUF_SIZE);
    if (!buf) die("malloc");
    while (left > 0) {
        size_t n = left < BUF_SIZE ? (size_t)left : BUF_SIZE;
        gen_fill(&state, buf, n);
        if (write_all(STDOUT_FILENO, buf, n) < 0) die("write stdout");
        left -= n;
    }
    return 0;
}

static int cmd_cid(void) {
    unsigned int cid;
    int fd = open("/dev/vsock", O_RDONLY | O_CLOEXEC);
    if (fd < 0) die("/dev/vsock");
    if (ioctl(fd, IOCTL_VM_SOCKETS_GET_LOCAL_CID, &cid) < 0) die("IOCTL_VM_SOCKETS_GET_LOCAL_CID");
    printf("%u\n", cid);
    return 0;
}

/* --- the pump ----------------------------------------------------------- */

enum src_kind { SRC_STDIN, SRC_GEN, SRC_ZERO, SRC_NONE };

struct pump {
    int sock;
    enum src_kind src;
    uint64_t src_bytes, src_seed;
    int discard, keep_open;
    uint64_t sent, received;
    int send_err, recv_err;
};

static void *sender(void *arg) {
    struct pump *p = arg;
    unsigned char *buf = malloc(BUF_SIZE);
    if (!buf) {
        p->send_err = ENOMEM;
        return NULL;
    }
    if (p->src == SRC_ZERO) memset(buf, 0, BUF_SIZE);
    uint64_t left = p->src_bytes, state = p->src_seed;
    for (;;) {
        size_t n;
        if (p->src == SRC_NONE) break;
        if (p->src == SRC_STDIN) {
            ssize_t r = read(STDIN_FILENO, buf, BUF_SIZE);
            if (r < 0 && errno == EINTR) continue;
            if (r < 0) {
                p->send_err = errno;
                fprintf(stderr, "%s: read stdin: %s\n", prog, strerror(errno));
                break;
            }
            if (r == 0) break;
            n = (size_t)r;
        } else {
            if (left == 0) break;
            n = left < BUF_SIZE ? (size_t)left : BUF_SIZE;
            if (p->src == SRC_GEN) gen_fill(&state, buf, n);
            left -= n;
        }
        if (write_all(p->sock, buf, n) < 0) {
            p->send_err = errno;
            fprintf(stderr, "%s: send: %s\n", prog, strerror(errno));
            break;
        }
        p->sent += n;
    }
    /* EOF for the peer; the other direction stays open. */
    if (!p->keep_open && shutdown(p->sock, SHUT_WR) < 0 && !p->send_err) {
        p->send_err = errno;
        fprintf(stderr, "%s: shutdown: %s\n", prog, strerror(errno));
    }
    free(buf);
    return NULL;
}

static void *receiver(void *arg) {
    struct pump *p = arg;
    unsigned char *buf = malloc(BUF_SIZE);
    if (!buf) {
        p->recv_err = ENOMEM;
        return NULL;
    }
    for (;;) {
        ssize_t r = read(p->sock, buf, BUF_SIZE);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            p->recv_err = errno;
            fprintf(stderr, "%s: recv: %s\n", prog, strerror(errno));
            break;
        }
        if (r == 0) break;
        p->received += (uint64_t)r;
        if (!p->discard && write_all(STDOUT_FILENO, buf, (size_t)r) < 0) {
            p->recv_err = errno;
            fprintf(stderr, "%s: write stdout: %s\n", prog, strerror(errno));
            break;
        }
    }
    free(buf);
    return NULL;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int vsock_connect(unsigned cid, unsigned port, double wait_s) {
    struct sockaddr_vm addr = {.svm_family = AF_VSOCK, .svm_cid = cid, .svm_port = port};
    double deadline = now() + wait_s;
    for (;;) {
        int s = socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (s < 0) die("socket(AF_VSOCK)");
        if (connect(s, (struct sockaddr *)&addr, sizeof addr) == 0) return s;
        int e = errno;
        close(s);
        if ((e == ECONNREFUSED || e == ECONNRESET || e == ETIMEDOUT) && now() < deadline) {
            usleep(200 * 1000);
            continue;
        }
        errno = e;
        die("connect");
    }
}

static int vsock_accept(unsigned port, int notify) {
    struct sockaddr_vm addr = {.svm_family = AF_VSOCK, .svm_cid = VMADDR_CID_ANY, .svm_port = port};
    int l = socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (l < 0) die("socket(AF_VSOCK)");
    if (bind(l, (struct sockaddr *)&addr, sizeof addr) < 0) die("bind");
    if (listen(l, 1) < 0) die("listen");
    if (notify) {
        fprintf(stderr, "SBX-VSOCK-LISTENING: %u\n", port);
        fflush(stderr);
    }
    int s;
    do s = accept4(l, NULL, NULL, SOCK_CLOEXEC);
    while (s < 0 && errno == EINTR);
    if (s < 0) die("accept");
    close(l);
    return s;
}

static void parse_src(struct pump *p, const char *s) {
    if (!strcmp(s, "-")) {
        p->src = SRC_STDIN;
    } else if (!strcmp(s, "none")) {
        p->src = SRC_NONE;
    } else if (!strncmp(s, "zero:", 5)) {
        p->src = SRC_ZERO;
        p->src_bytes = parse_u64(s + 5, "zero:BYTES");
    } else if (!strncmp(s, "gen:", 4)) {
        char *copy = strdup(s + 4), *colon = copy ? strchr(copy, ':') : NULL;
        if (!colon) usage();
        *colon = 0;
        p->src = SRC_GEN;
        p->src_bytes = parse_u64(copy, "gen:BYTES");
        p->src_seed = parse_u64(colon + 1, "gen SEED");
        free(copy);
    } else {
        usage();
    }
}

int main(int argc, char **argv) {
    struct pump p = {.src = SRC_STDIN};
    int notify = 0, report = 0, opt;
    double wait_s = 0;

    if (argc >= 2 && !strcmp(argv[1], "gen")) return cmd_gen(argc - 1, argv + 1);
    if (argc == 2 && !strcmp(argv[1], "cid")) return cmd_cid();
    while ((opt = getopt(argc, argv, "+s:o:nkrw:")) != -1) {
        switch (opt) {
        case 's': parse_src(&p, optarg); break;
        case 'o':
            if (!strcmp(optarg, "null")) p.discard = 1;
            else if (strcmp(optarg, "-")) usage();
            break;
        case 'n': notify = 1; break;
        case 'k': p.keep_open = 1; break;
        case 'r': report = 1; break;
        case 'w': wait_s = (double)parse_u64(optarg, "-w SEC"); break;
        default: usage();
        }
    }
    argc -= optind;
    argv += optind;
    if (argc < 1) usage();
    /* A peer that goes away must be an error we report, not a silent kill. */
    signal(SIGPIPE, SIG_IGN);

    if (!strcmp(argv[0], "connect") && argc == 3) {
        p.sock = vsock_connect((unsigned)parse_u64(argv[1], "CID"),
                               (unsigned)parse_u64(argv[2], "PORT"), wait_s);
    } else if (!strcmp(argv[0], "listen") && argc == 2) {
        p.sock = vsock_accept((unsigned)parse_u64(argv[1], "PORT"), notify);
    } else {
        usage();
    }

    double start = now();
    pthread_t ts, tr;
    if (pthread_create(&ts, NULL, sender, &p) || pthread_create(&tr, NULL, receiver, &p)) {
        fprintf(stderr, "%s: pthread_create failed\n", prog);
        return 1;
    }
    pthread_join(ts, NULL);
    pthread_join(tr, NULL);
    double secs = now() - start;
    close(p.sock);
    if (report) {
        fprintf(stderr, "SBX-VSOCK-REPORT: sent=%" PRIu64 " received=%" PRIu64 " seconds=%.6f\n",
                p.sent, p.received, secs);
    }
    return (p.send_err || p.recv_err) ? 1 : 0;
}
