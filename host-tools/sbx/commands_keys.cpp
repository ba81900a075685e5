// keys create, keys ls, keys rm: API keys through sbxd (docs/api.md,
// "API keys"; docs/sbx.md). A new key's secret is shown once: on a
// terminal as the only line on stdout (the note is on stderr), piped in
// the `key` event.
#include "host-tools/sbx/commands.hpp"

namespace sbx::cli {

namespace {

std::string scope_of(const Json& key) {
    std::string text = key.value("sandboxId", Json()).is_string() ? cell(key, "sandboxId") : "host";
    if (key.value("readOnly", false)) {
        text += ", read-only";
    }
    return text;
}

}  // namespace

int run_keys_create(const Context& ctx, const KeyOptions& options) {
    auto body = key_body(options);
    if (!body) {
        return ctx.out.fail(body.error());
    }
    Outcome reply = call(ctx, post(target({"v1", "keys"}), *body));
    if (!reply.ok()) {
        return ctx.out.fail(reply.failure());
    }
    const Json key = reply.body().value("key", Json::object());
    const std::string secret = reply.body().value("secret", "");
    if (ctx.out.json()) {
        ctx.out.event({{"type", "key"}, {"key", key}, {"secret", secret}});
    } else {
        ctx.out.note(fmt::format("created API key {} ({}); the secret below is shown only now", cell(key, "id"),
                                 scope_of(key)));
        ctx.out.text(secret + "\n");
    }
    return kExitOk;
}

int run_keys_ls(const Context& ctx) {
    Outcome reply = call(ctx, get(target({"v1", "keys"})));
    if (!reply.ok()) {
        return ctx.out.fail(reply.failure());
    }
    const Json keys = reply.body().value("keys", Json::array());
    if (ctx.out.json()) {
        ctx.out.event({{"type", "keys"}, {"keys", keys}});
        return kExitOk;
    }
    std::vector<std::vector<std::string>> rows;
    for (const auto& k : keys) {
        rows.push_back({cell(k, "id"), cell(k, "name"), scope_of(k), cell(k, "createdAt"),
                        k.value("expiresAt", Json()).is_string() ? cell(k, "expiresAt") : "never"});
    }
    ctx.out.text(format_table({"ID", "NAME", "SCOPE", "CREATED", "EXPIRES"}, rows));
    return kExitOk;
}

int run_keys_rm(const Context& ctx, const std::vector<std::string>& ids) {
    int status = kExitOk;
    for (const auto& id : ids) {
        Outcome reply = call(ctx, del(target({"v1", "keys", id})));
        if (!reply.ok()) {
            status = ctx.out.fail(reply.failure());
            continue;
        }
        if (ctx.out.json()) {
            ctx.out.event({{"type", "key_deleted"}, {"id", id}});
        } else {
            ctx.out.text("revoked API key " + id + "\n");
        }
    }
    return status;
}

}  // namespace sbx::cli
