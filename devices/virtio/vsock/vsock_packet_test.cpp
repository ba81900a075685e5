// The vsock header codec and the hybrid CONNECT line.
#include "devices/virtio/vsock/vsock_packet.hpp"

#include <doctest/doctest.h>
#include <sys/socket.h>

#include "base/unique_fd.hpp"
#include "devices/virtio/vsock/vsock_host.hpp"

using namespace sbx;
using namespace sbx::virtio::vsock;

TEST_CASE("the header is 44 little-endian bytes in the virtio_vsock_hdr order") {
    PacketHeader h{0x0102030405060708ULL, 2, 0x11223344, 0x55667788, 0x99aabbcc, 1, 5, 3, 0x40000, 0x1234};
    WireHeader w = encode_header(h);
    CHECK(w[0] == 0x08);
    CHECK(w[7] == 0x01);
    CHECK(w[8] == 2);
    CHECK(w[16] == 0x44);
    CHECK(w[20] == 0x88);
    CHECK(w[24] == 0xcc);
    CHECK(w[28] == 1);   // type
    CHECK(w[30] == 5);   // op
    CHECK(w[32] == 3);   // flags
    CHECK(w[38] == 4);   // buf_alloc 0x40000
    CHECK(w[40] == 0x34);
    CHECK(w[41] == 0x12);
    CHECK(decode_header(w) == h);
    CHECK(h.operation() == Op::Rw);
    CHECK(op_name(5) == "RW");
    CHECK(op_name(42) == "op 42");
}

TEST_CASE("CONNECT line parsing") {
    CHECK(parse_connect_line("CONNECT 0") == 0u);
    CHECK(parse_connect_line("CONNECT 52") == 52u);
    CHECK(parse_connect_line("CONNECT 4294967295") == 4294967295u);
    for (const char* bad : {"", "CONNECT", "CONNECT ", "CONNECT 4294967296", "CONNECT 12345678901", "CONNECT -1",
                            "CONNECT +1", "CONNECT 1 ", "CONNECT  1", "connect 1", "CONNECT 1\r", "LISTEN 1"}) {
        CAPTURE(bad);
        CHECK_FALSE(parse_connect_line(bad).has_value());
    }
    CHECK(ok_line(1073741824) == "OK 1073741824\n");
}

TEST_CASE("read_connect_line consumes the line and nothing after it") {
    int fds[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds) == 0);
    UniqueFd a(fds[0]), b(fds[1]);
    using Status = ConnectLine::Status;
    CHECK(read_connect_line(b.get()).status == Status::Incomplete);
    REQUIRE(::send(a.get(), "CONNECT 8", 9, 0) == 9);
    CHECK(read_connect_line(b.get()).status == Status::Incomplete);
    REQUIRE(::send(a.get(), "0\nrest", 6, 0) == 6);
    ConnectLine line = read_connect_line(b.get());
    CHECK(line.status == Status::Complete);
    CHECK(line.port == 80);
    char buf[8] = {};
    CHECK(::recv(b.get(), buf, sizeof(buf), 0) == 4);
    CHECK(std::string(buf, 4) == "rest");

    std::string long_line(kMaxConnectLine, '1');
    REQUIRE(::send(a.get(), long_line.data(), long_line.size(), 0) == static_cast<ssize_t>(long_line.size()));
    CHECK(read_connect_line(b.get()).status == Status::Refused);
    a.reset();
    UniqueFd c, d;
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds) == 0);
    c = UniqueFd(fds[0]);
    d = UniqueFd(fds[1]);
    c.reset();
    CHECK(read_connect_line(d.get()).status == Status::Refused);  // EOF
}
