#include "host-tools/sbxd/daemon/service_caller.hpp"

#include <condition_variable>
#include <thread>

#include "host-tools/sbxd/crypto/random.hpp"

namespace sbx::sbxd {

namespace {

constexpr std::size_t kStreamBuffer = 1u << 20;

// Produces a streamed body on a thread of its own and hands it to `sink`
// as it comes (the server's session does the same toward a socket).
void drain(const http::BodyProducer& producer, const mcp::BodySink& sink) {
    std::mutex mutex;
    std::condition_variable woken;
    bool signalled = false;
    http::BodyWriter writer(kStreamBuffer, [&] {
        {
            std::lock_guard lock(mutex);
            signalled = true;
        }
        woken.notify_one();
    });
    std::thread thread([&] {
        producer(writer);
        writer.finish();
    });
    bool wanted = true;
    while (true) {
        while (auto chunk = writer.take()) {
            if (wanted && !sink(*chunk)) {
                wanted = false;
                writer.cancel();  // the producer's writes fail from now on; it ends
            }
        }
        if (writer.finished()) {
            break;
        }
        std::unique_lock lock(mutex);
        woken.wait(lock, [&] { return signalled; });
        signalled = false;
    }
    thread.join();
}

}  // namespace

Result<mcp::ApiHead> ServiceCaller::call(const mcp::ApiCall& call, const mcp::BodySink& sink) {
    auto target = http::split_target(call.target);
    if (!target) {
        return target.error();
    }
    http::Request request;
    request.method = call.method;
    request.path = std::move(target->first);
    request.query = std::move(target->second);
    request.headers = call.headers;
    if (auto authorization = outer_.header("Authorization"); !authorization.empty()) {
        request.headers.emplace_back("Authorization", std::string(authorization));
    }
    request.transport = outer_.transport;
    request.principal = outer_.principal;  // the Unix socket's; TCP and guest requests authenticate again
    auto id = random_hex(8);
    request.request_id = "req_" + (id ? *id : std::string("0"));
    if (service_.streams_body(request)) {
        auto reader = std::make_shared<http::BodyReader>(call.body.size() + 1, [] {});
        if (!call.body.empty()) {
            (void)reader->push(call.body);
        }
        reader->finish();
        request.body_stream = std::move(reader);
    } else {
        request.body = call.body;
    }
    http::Response response = service_.handle(std::move(request));
    mcp::ApiHead head{response.status, "application/json"};
    for (const auto& [name, value] : response.headers) {
        if (name == "Content-Type") {
            head.content_type = value;
        }
    }
    if (response.stream) {
        drain(response.stream, sink);
    } else {
        (void)sink(response.body);
    }
    return head;
}

}  // namespace sbx::sbxd
