/*
 * sbx-web: the smallest HTTP/1.0 server and client, static, for container
 * images built FROM scratch in the Docker checks of the full image
 * (tests/guest/sbxd/docker.sh): a scratch image has no shell, no libc and no
 * resolver, so this takes IPv4 addresses only.
 *
 *   sbx-web serve PORT TEXT        answer every request with 200 and TEXT
 *   sbx-web get ADDR PORT [TRIES]  GET / from ADDR:PORT, print the body;
 *                                  retry a refused connection once a second
 *                                  up to TRIES times (default 1)
 *   sbx-web relay PORT ADDR UPPORT serve "relay:" + the body of GET / from
 *                                  ADDR:UPPORT, fetched per request
 *
 * Requests and answers follow RFC 1945 (HTTP/1.0): one request per
 * connection, the server closes after the body.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int write_all(int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w <= 0) return -1;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

/* GET / from addr:port into buf (the body, NUL-terminated); 0 on success. */
static int fetch(const char *addr, int port, int tries, char *buf, size_t cap) {
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port)};
  if (inet_pton(AF_INET, addr, &sa.sin_addr) != 1) {
    fprintf(stderr, "sbx-web: not an IPv4 address: %s\n", addr);
    return -1;
  }
  for (int i = 0; i < tries; i++) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) {
      static const char req[] = "GET / HTTP/1.0\r\n\r\n";
      size_t got = 0;
      ssize_t r = 0;
      if (write_all(fd, req, sizeof req - 1) == 0) {
        while (got + 1 < cap && (r = read(fd, buf + got, cap - 1 - got)) > 0) got += (size_t)r;
      }
      close(fd);
      buf[got] = '\0';
      char *body = strstr(buf, "\r\n\r\n");
      if (r < 0 || body == NULL) return -1;
      memmove(buf, body + 4, strlen(body + 4) + 1);
      return 0;
    }
    close(fd);
    if (i + 1 < tries) sleep(1);
  }
  perror("sbx-web: connect");
  return -1;
}

/* Accepts forever; each answer is TEXT, or with upstream set, "relay:" and
 * what upstream answered at that moment. */
static int serve(int port, const char *text, const char *up_addr, int up_port) {
  int one = 1;
  int ls = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port),
                           .sin_addr.s_addr = htonl(INADDR_ANY)};
  if (ls < 0 || setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
      bind(ls, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(ls, 16) < 0) {
    perror("sbx-web: listen");
    return 1;
  }
  fprintf(stderr, "sbx-web: serving on port %d\n", port);
  for (;;) {
    int c = accept(ls, NULL, NULL);
    if (c < 0) continue;
    char req[2048], body[4096], head[128];
    (void)read(c, req, sizeof req); /* the request line is not looked at */
    if (up_addr != NULL) {
      char up[4000];
      snprintf(body, sizeof body, "relay:%s",
               fetch(up_addr, up_port, 1, up, sizeof up) == 0 ? up : "(upstream failed)");
    } else {
      snprintf(body, sizeof body, "%s", text);
    }
    int n = snprintf(head, sizeof head, "HTTP/1.0 200 OK\r\nContent-Length: %zu\r\n\r\n", strlen(body));
    (void)(write_all(c, head, (size_t)n) == 0 && write_all(c, body, strlen(body)) == 0);
    close(c);
  }
}

int main(int argc, char **argv) {
  if (argc == 4 && strcmp(argv[1], "serve") == 0) return serve(atoi(argv[2]), argv[3], NULL, 0);
  if (argc == 5 && strcmp(argv[1], "relay") == 0) return serve(atoi(argv[2]), NULL, argv[3], atoi(argv[4]));
  if ((argc == 4 || argc == 5) && strcmp(argv[1], "get") == 0) {
    char buf[4096];
    if (fetch(argv[2], atoi(argv[3]), argc == 5 ? atoi(argv[4]) : 1, buf, sizeof buf) != 0) return 1;
    printf("%s\n", buf);
    return 0;
  }
  fprintf(stderr, "usage: sbx-web serve PORT TEXT | get ADDR PORT [TRIES] | relay PORT ADDR UPPORT\n");
  return 2;
}
