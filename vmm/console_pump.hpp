// Moves the guest's serial console between the UART and the Console on an
// EventLoop's thread, never blocking the VM: output the reader cannot take
// yet waits for EPOLLOUT (and the UART drops what exceeds its own bound);
// input waits while the UART's receive FIFO is full and is offered again
// every 10 ms, and the input fd is not read while 4 KiB are waiting, so no
// typed byte is lost.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>

#include "base/event_fd.hpp"
#include "base/event_loop.hpp"
#include "base/unique_fd.hpp"
#include "devices/legacy/serial.hpp"
#include "vmm/console.hpp"

namespace sbx {

class ConsolePump {
public:
    static Result<std::unique_ptr<ConsolePump>> create(Console console);

    // For the UART's on_output callback (a vCPU thread, under the UART's
    // lock): thread-safe, never blocks.
    void output_ready() const;
    // From now on `loop`'s thread moves bytes between `serial` and the
    // console. Both must outlive the pump's use of the loop.
    [[nodiscard]] Result<void> attach(Serial& serial, EventLoop& loop);
    // After the loop has stopped: writes the output still waiting, for at
    // most `limit` when the reader is slow.
    void drain(std::chrono::milliseconds limit);

private:
    ConsolePump(Console console, EventFd ready, UniqueFd retry_timer)
        : console_(std::move(console)), ready_(std::move(ready)), retry_timer_(std::move(retry_timer)) {}

    // Returns true when output is still waiting for the reader.
    bool pump_output();
    void read_input();
    void offer_input();
    void update_watches();

    Console console_;
    EventFd ready_;         // the UART has output
    UniqueFd retry_timer_;  // timerfd: offer waiting input again
    Serial* serial_ = nullptr;
    EventLoop* loop_ = nullptr;
    std::string pending_out_;  // taken from the UART, not yet written
    std::string pending_in_;   // read from the console, not yet in the FIFO
    bool input_open_ = false;
    bool retry_armed_ = false;
    // What the loop watches on the console's fds (one fd when input and
    // output share a socket).
    std::map<int, std::uint32_t> watched_;
};

}  // namespace sbx
