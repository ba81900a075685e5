#include "host-tools/sbxd/net/egress_table.hpp"

#include <nftables/libnftables.h>

#include "base/log.hpp"

namespace sbx::sbxd::net {
namespace {

std::string trimmed(const char* text) {
    std::string s = text == nullptr ? "" : text;
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) {
        s.pop_back();
    }
    return s;
}

}  // namespace

void Nftables::Free::operator()(nft_ctx* ctx) const {
    nft_ctx_free(ctx);
}

Result<Nftables> Nftables::open(bool dry_run) {
    nft_ctx* ctx = nft_ctx_new(NFT_CTX_DEFAULT);
    if (ctx == nullptr) {
        return make_coded_error("nftables", "cannot make a libnftables context");
    }
    Nftables nft(ctx);
    // JSON output also makes libnftables parse its input as JSON
    // (libnftables(3)); both streams go to buffers read after each command.
    nft_ctx_output_set_flags(ctx, NFT_CTX_OUTPUT_JSON);
    if (nft_ctx_buffer_output(ctx) != 0 || nft_ctx_buffer_error(ctx) != 0) {
        return make_coded_error("nftables", "cannot buffer libnftables' output");
    }
    nft_ctx_set_dry_run(ctx, dry_run);
    return nft;
}

Result<std::string> Nftables::run_text(std::string_view command) {
    const std::string text(command);
    const int rc = nft_run_cmd_from_buffer(ctx_.get(), text.c_str());
    std::string output = nft_ctx_get_output_buffer(ctx_.get());
    std::string errors = trimmed(nft_ctx_get_error_buffer(ctx_.get()));
    if (rc != 0) {
        return make_coded_error("nftables", "nftables refused the change: {}",
                                errors.empty() ? "no reason given" : errors);
    }
    return output;
}

Result<void> Nftables::run(const nlohmann::json& batch) {
    auto r = run_text(batch.dump());
    if (!r) {
        return r.error();
    }
    return ok();
}

Result<nlohmann::json> Nftables::list(std::string_view what) {
    auto out = run_text(fmt::format("list {}", what));
    if (!out) {
        return out.error();
    }
    auto parsed = nlohmann::json::parse(*out, nullptr, false);
    if (parsed.is_discarded()) {
        return make_coded_error("nftables", "libnftables listed something that is not JSON");
    }
    return parsed;
}

Result<EgressTable> EgressTable::create(const EgressPolicy& policy, std::span<const EgressMember> members) {
    auto nft = Nftables::open();
    if (!nft) {
        return nft.error();
    }
    EgressTable table(std::move(*nft));
    if (auto r = table.rebuild(policy, members); !r) {
        table.release();  // not ours: whatever was there before is left as it was
        return r.error();
    }
    return table;
}

Result<void> EgressTable::rebuild(const EgressPolicy& policy, std::span<const EgressMember> members) {
    if (!nft_) {
        return make_error("egress table: released");
    }
    if (auto r = nft_->run(table_batch(policy, members)); !r) {
        return r.error().context(fmt::format("building table {} {}", kTableFamily, kTableName));
    }
    return ok();
}

// A moved-from optional still holds a (moved-from) value: take it out.
EgressTable::EgressTable(EgressTable&& other) noexcept : nft_(std::exchange(other.nft_, std::nullopt)) {}

EgressTable& EgressTable::operator=(EgressTable&& other) noexcept {
    if (this != &other) {
        if (auto r = destroy(); !r) {
            log::warn("{}", r.error().to_string());
        }
        nft_ = std::exchange(other.nft_, std::nullopt);
    }
    return *this;
}

EgressTable::~EgressTable() {
    if (auto r = destroy(); !r) {
        log::warn("{}", r.error().to_string());
    }
}

Result<void> EgressTable::add(const EgressMember& member) {
    if (!nft_) {
        return make_error("egress table: released");
    }
    if (auto r = nft_->run(add_member_batch(member)); !r) {
        return r.error().context(fmt::format("adding {} to the egress table", member.interface));
    }
    return ok();
}

Result<void> EgressTable::change(const EgressMember& from, const EgressMember& to) {
    if (!nft_) {
        return make_error("egress table: released");
    }
    if (auto r = nft_->run(change_member_batch(from, to)); !r) {
        return r.error().context(fmt::format("changing {}'s egress", to.interface));
    }
    return ok();
}

Result<void> EgressTable::remove(const EgressMember& member) {
    if (!nft_) {
        return make_error("egress table: released");
    }
    if (auto r = nft_->run(remove_member_batch(member)); !r) {
        return r.error().context(fmt::format("removing {} from the egress table", member.interface));
    }
    return ok();
}

Result<void> EgressTable::destroy() {
    if (!nft_) {
        return ok();
    }
    auto r = nft_->run(delete_table_batch());
    nft_.reset();
    if (!r) {
        return r.error().context(fmt::format("deleting table {} {}", kTableFamily, kTableName));
    }
    return ok();
}

void EgressTable::release() {
    nft_.reset();
}

Result<bool> egress_table_exists() {
    auto nft = Nftables::open();
    if (!nft) {
        return nft.error();
    }
    auto tables = nft->list("tables");
    if (!tables) {
        return tables.error();
    }
    for (const auto& item : tables->value("nftables", nlohmann::json::array())) {
        if (item.contains("table") && item["table"].value("family", "") == kTableFamily &&
            item["table"].value("name", "") == kTableName) {
            return true;
        }
    }
    return false;
}

}  // namespace sbx::sbxd::net
