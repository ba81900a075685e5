// What the agent keeps about its identity across a snapshot: the
// generation the host last gave it (the agent process is restored with
// the guest, so it survives), and the kernel interface the identity op
// works through. One identity op runs at a time.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>

#include "guest-agent/identity/identity_kernel.hpp"

namespace sbx::agent {

class IdentityState {
public:
    explicit IdentityState(std::shared_ptr<IdentityKernel> kernel) : kernel_(std::move(kernel)) {}

    [[nodiscard]] IdentityKernel& kernel() { return *kernel_; }
    [[nodiscard]] std::mutex& mutex() { return mutex_; }
    [[nodiscard]] std::uint64_t generation() const { return generation_.load(); }
    void set_generation(std::uint64_t generation) { generation_.store(generation); }

    // The guest's vsock CID: the vsock device's answer, else the local
    // address of `connection` (an accepted vsock connection), else nothing.
    [[nodiscard]] std::optional<std::uint32_t> cid(int connection) {
        if (auto cid = kernel_->local_cid()) {
            return cid;
        }
        return kernel_->socket_cid(connection);
    }

private:
    std::shared_ptr<IdentityKernel> kernel_;
    std::mutex mutex_;
    std::atomic<std::uint64_t> generation_{0};
};

}  // namespace sbx::agent
