// sbx-fake-agent: a stand-in for sbx-agent in guest-image tests, installed
// as /usr/local/bin/sbx-agent (SBX_AGENT=... images/build rootfs-slim|minimal).
// It does what the images promise the real agent, and says so on the
// console (/dev/console, one "SBX-FAKE-AGENT-<WHAT>: ..." line each):
//
//   START      pid, parent pid, guest uptime, sbx.token= from the kernel
//              command line, SBX_TEST_ENV from its environment (set through
//              /etc/sandboxer/env), whether stdout is the journal or console
//   TIMER      it wrote the boot-timer byte (sbx-vmm then logs "guest boot
//              time" for the agent's start: what the real agent should do)
//   CRASH      with sbx.test.crash-once on the command line, the first run
//              of each boot exits with status 3 (the supervisor must
//              restart it)
//   ANNOUNCED  it connected to host CID 2 port 53 and sent
//              "SBX-FAKE-AGENT-READY token=<token>\n" (like the real agent's
//              ready message, but a text line)
//   LISTENING  it listens on vsock port 52 (connections are closed at once)
//   REBOOT     with sbx.test.agent-reboot, it runs `reboot` after the
//              announcement, as the agent does when asked to end the VM
//   STOP       it got SIGTERM and exits 0
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <linux/vm_sockets.h>

static int console_fd = -1;

static void say(const char *what, const char *fmt, ...) {
    char line[1024];
    int n = snprintf(line, sizeof line, "SBX-FAKE-AGENT-%s: ", what);
    va_list ap;
    va_start(ap, fmt);
    n += vsnprintf(line + n, sizeof line - (size_t)n - 2, fmt, ap);
    va_end(ap);
    if (n > (int)sizeof line - 2) n = (int)sizeof line - 2;
    line[n++] = '\n';
    if (write(console_fd, line, (size_t)n) < 0) {
        // nowhere else to report
    }
}

static void read_file(const char *path, char *buf, size_t size) {
    buf[0] = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    ssize_t n = read(fd, buf, size - 1);
    close(fd);
    buf[n > 0 ? n : 0] = 0;
}

// 1 if WORD (alone or as WORD=...) is on the command line.
static int cmdline_has(const char *cmdline, const char *word) {
    size_t len = strlen(word);
    for (const char *p = cmdline; (p = strstr(p, word)) != NULL; p += len) {
        if ((p == cmdline || p[-1] == ' ') && (p[len] == ' ' || p[len] == '\n' || p[len] == 0 || p[len] == '='))
            return 1;
    }
    return 0;
}

static void cmdline_value(const char *cmdline, const char *key, char *out, size_t size) {
    out[0] = 0;
    size_t len = strlen(key);
    for (const char *p = cmdline; (p = strstr(p, key)) != NULL; p += len) {
        if (p != cmdline && p[-1] != ' ') continue;
        p += len;
        size_t i = 0;
        while (p[i] && p[i] != ' ' && p[i] != '\n' && i + 1 < size) {
            out[i] = p[i];
            i++;
        }
        out[i] = 0;
        return;
    }
}

static volatile sig_atomic_t stop;
static void on_term(int sig) { (void)sig; stop = 1; }

int main(void) {
    console_fd = open("/dev/console", O_WRONLY | O_NOCTTY | O_CLOEXEC);
    if (console_fd < 0) console_fd = STDOUT_FILENO;
    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, NULL);
    // SIGTERM stays blocked except inside ppoll() below: one arriving just
    // before the wait would otherwise be handled before it and missed.
    sigset_t term, unblocked;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    sigprocmask(SIG_BLOCK, &term, &unblocked);
    sigdelset(&unblocked, SIGTERM);

    char cmdline[4096], uptime[64], token[256];
    read_file("/proc/cmdline", cmdline, sizeof cmdline);
    read_file("/proc/uptime", uptime, sizeof uptime);
    uptime[strcspn(uptime, " \n")] = 0;
    cmdline_value(cmdline, "sbx.token=", token, sizeof token);
    const char *env = getenv("SBX_TEST_ENV");
    struct stat st;
    const char *out = "other";
    if (fstat(STDOUT_FILENO, &st) == 0) out = S_ISSOCK(st.st_mode) ? "socket" : S_ISCHR(st.st_mode) ? "chardev" : "other";
    say("START", "pid=%d ppid=%d uptime=%s token=%s env=%s stdout=%s", (int)getpid(), (int)getppid(), uptime,
        token[0] ? token : "(none)", env ? env : "(unset)", out);

    // The boot timer (images/README.md): a byte 123 at guest physical
    // 0xd0000000. The first write of a boot is what sbx-vmm reports.
    int mem = open("/dev/mem", O_RDWR | O_SYNC | O_CLOEXEC);
    if (mem >= 0) {
        volatile unsigned char *p = mmap(NULL, 4096, PROT_WRITE, MAP_SHARED, mem, 0xd0000000);
        if (p != MAP_FAILED) {
            *p = 123;
            munmap((void *)p, 4096);
            say("TIMER", "written");
        } else {
            say("TIMER", "mmap failed: %s", strerror(errno));
        }
        close(mem);
    } else {
        say("TIMER", "no /dev/mem: %s", strerror(errno));
    }

    if (cmdline_has(cmdline, "sbx.test.crash-once")) {
        const char *flag = "/run/sbx-fake-agent.crashed";
        int fd = open(flag, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd >= 0) {
            close(fd);
            say("CRASH", "first run of this boot exits with status 3");
            return 3;
        }
    }

    int lfd = socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (lfd >= 0) {
        struct sockaddr_vm a;
        memset(&a, 0, sizeof a);
        a.svm_family = AF_VSOCK;
        a.svm_cid = VMADDR_CID_ANY;
        a.svm_port = 52;
        if (bind(lfd, (struct sockaddr *)&a, sizeof a) == 0 && listen(lfd, 16) == 0) {
            say("LISTENING", "vsock port 52");
        } else {
            say("LISTENING", "failed: %s", strerror(errno));
            close(lfd);
            lfd = -1;
        }
    } else {
        say("LISTENING", "no AF_VSOCK: %s", strerror(errno));
    }

    int announced = 0;
    for (int attempt = 0; attempt < 600 && !announced && !stop; attempt++) {
        int fd = socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            say("ANNOUNCED", "no AF_VSOCK: %s", strerror(errno));
            break;
        }
        struct sockaddr_vm a;
        memset(&a, 0, sizeof a);
        a.svm_family = AF_VSOCK;
        a.svm_cid = VMADDR_CID_HOST;
        a.svm_port = 53;
        if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0) {
            char msg[512];
            int n = snprintf(msg, sizeof msg, "SBX-FAKE-AGENT-READY token=%s\n", token[0] ? token : "(none)");
            if (write(fd, msg, (size_t)n) == n) {
                announced = 1;
                say("ANNOUNCED", "host port 53 after %d attempts", attempt + 1);
            }
            // Half-close is not relied on: the host reads one line.
        } else if (attempt == 599) {
            say("ANNOUNCED", "failed: %s", strerror(errno));
        }
        close(fd);
        if (!announced) usleep(100 * 1000);
    }

    if (cmdline_has(cmdline, "sbx.test.agent-reboot")) {
        say("REBOOT", "running reboot");
        pid_t pid = fork();
        if (pid == 0) {
            sigprocmask(SIG_SETMASK, &unblocked, NULL);
            execlp("reboot", "reboot", (char *)NULL);
            _exit(127);
        }
        int status = 0;
        if (pid > 0) waitpid(pid, &status, 0);
        say("REBOOT", "reboot exited with status %d", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    }

    while (!stop) {
        struct pollfd p = {lfd, POLLIN, 0};
        if (ppoll(&p, lfd >= 0 ? 1 : 0, NULL, &unblocked) > 0) {
            int c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
            if (c >= 0) close(c);
        }
    }
    say("STOP", "SIGTERM");
    return 0;
}
