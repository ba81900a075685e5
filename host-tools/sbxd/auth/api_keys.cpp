#include "host-tools/sbxd/auth/api_keys.hpp"

#include "host-tools/sbxd/crypto/random.hpp"
#include "host-tools/sbxd/store/store.hpp"

namespace sbx::sbxd {

namespace {

constexpr std::string_view kKeyPrefix = "sbxk_";
constexpr std::size_t kKeyBytes = 32;

Error unauthorized(std::string_view why) {
    return make_coded_error("unauthorized", "{}", why);
}

}  // namespace

Result<NewApiKey> make_api_key(std::string name, std::optional<std::string> sandbox_id, UnixMillis now,
                               KeyLimits limits) {
    auto secret = random_hex(kKeyBytes);
    if (!secret) {
        return secret.error();
    }
    auto id = random_hex(8);
    if (!id) {
        return id.error();
    }
    NewApiKey key;
    key.secret = std::string(kKeyPrefix) + *secret;
    key.record = ApiKeyRecord{"key_" + *id,         sha256_hex(key.secret), std::move(name), std::move(sandbox_id),
                              now,                  limits.read_only,       limits.expires_at};
    return key;
}

Result<Principal> authenticate_bearer(Store& store, std::string_view authorization, UnixMillis now) {
    constexpr std::string_view kScheme = "Bearer ";
    if (authorization.empty()) {
        return unauthorized("this listener needs 'Authorization: Bearer <API key>'");
    }
    if (authorization.substr(0, kScheme.size()) != kScheme) {
        return unauthorized("the Authorization header must be 'Bearer <API key>'");
    }
    std::string_view secret = authorization.substr(kScheme.size());
    if (secret.substr(0, kKeyPrefix.size()) != kKeyPrefix ||
        secret.size() != kKeyPrefix.size() + 2 * kKeyBytes) {
        return unauthorized("the API key is not one sbxd issued");
    }
    auto found = store.find_api_key(sha256_hex(secret));
    if (!found) {
        return found.error();
    }
    if (!*found) {
        return unauthorized("unknown API key");
    }
    const ApiKeyRecord& key = **found;
    if (key.expires_at && now >= *key.expires_at) {
        return unauthorized("the API key expired");
    }
    return Principal{key.id, key.sandbox_id, key.read_only};
}

}  // namespace sbx::sbxd
