// sbxd: the per-host supervisor (docs/sbxd.md, docs/api.md).
//
//   sbxd [--state-dir DIR] [--listen unix:PATH|tcp:HOST:PORT]... [--images DIR]
//   sbxd keys create [--name NAME] [--sandbox ID] [--read-only] [--expires 30d]
//                                                   prints a new API key once
//   sbxd keys ls | sbxd keys rm KEY_ID
//
// Exit status: 0 after SIGTERM/SIGINT, 1 when it could not start (bad
// flags, the state directory, a listener), 2 for a failed keys command.
#include <CLI/CLI.hpp>

#include <grp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <thread>

#include "base/log.hpp"
#include "host-tools/sbxd/api/requests.hpp"
#include "host-tools/sbxd/auth/api_keys.hpp"
#include "host-tools/sbxd/daemon/api_service.hpp"
#include "host-tools/sbxd/daemon/views.hpp"
#include "host-tools/sbxd/http/server.hpp"
#include "host-tools/sbxd/daemon/hosted_backend.hpp"
#include "host-tools/sbxd/daemon/hosting.hpp"
#include "host-tools/sbxd/daemon/mcp_endpoint.hpp"
#include "host-tools/sbxd/net/host_network.hpp"
#include "host-tools/sbxd/vmm/cpu_signature.hpp"
#include "host-tools/sbxd/vmm/vmm_driver.hpp"

namespace {

using namespace sbx;
using namespace sbx::sbxd;
namespace asio = boost::asio;

constexpr const char* kVersion = "0.1.0";
constexpr int kExitStartFailed = 1;
constexpr int kExitKeysFailed = 2;

struct Options {
    std::string state_dir = "/var/lib/sandboxer";
    std::vector<std::string> listen;
    std::string images_dir;
    std::string default_image{kDefaultImageName};  // boot_images.hpp
    std::string vmm_path;
    unsigned boot_timeout_s = 600;
    std::string socket_group = "sandboxer";
    unsigned workers = 0;
    // Admission (docs/sbxd.md "Admission").
    int max_running = 64;
    int max_starts_per_minute = 60;
    int memory_budget_mib = 0;             // 0: the host's memory less 512 MiB
    std::vector<std::string> default_env;  // K=V
    std::string cpu_signature_override;    // test-only: pretend to be another CPU
    // Test-only: lifecycle time scaled down for guest tests (docs/sbxd.md).
    std::int64_t min_ttl_seconds = api::kMinTtlSeconds;
    unsigned idle_minute_seconds = 60;
    // The sandboxes' network (docs/network.md).
    std::string network = "on";
    std::string cgroup_root = "auto";  // docs/sbxd.md, "Cgroups"
    std::string jail = "on";           // docs/security.md, "sbx-vmm's jail"
    std::uint32_t jail_uid_base = 0x70000000;
    std::uint64_t console_log_max_bytes = DriverConfig::kDefaultConsoleLogMaxBytes;
    std::string net_pool = std::string(net::kDefaultPool);
    std::string uplink;
    std::vector<std::string> dns_upstreams;
    std::vector<std::string> dns_rebind_ok;  // test-only
    // Hosted ports (docs/sbxd.md, "Hosted ports").
    HostingOptions hosting;
    McpOptions mcp;  // docs/mcp.md, "/mcp"
    std::string key_name = "default";
    std::string key_sandbox;
    bool key_read_only = false;
    std::string key_expires;  // a duration ("90s", "12h", "30d"); empty: never
    std::string key_id;
};

Result<void> make_directory(const std::string& path, unsigned mode) {
    std::error_code ec;
    std::filesystem::create_directories(path, ec);
    if (ec) {
        return make_error("creating {}: {}", path, ec.message());
    }
    if (::chmod(path.c_str(), mode) != 0) {
        return sys_error("setting the mode of {}", path);
    }
    return ok();
}

// The Unix socket is 0660 (issue 12), with group `sandboxer` when that
// group exists so that its members may use sbx without root; otherwise
// the group stays sbxd's own.
SocketAccess unix_socket_access(const std::string& group_name) {
    if (struct group* group = ::getgrnam(group_name.c_str()); group != nullptr) {
        return SocketAccess{0660, static_cast<int>(group->gr_gid)};
    }
    return SocketAccess{0660, -1};
}

std::string host_name() {
    char name[256] = {};
    if (::gethostname(name, sizeof name - 1) != 0) {
        return "localhost";
    }
    return name;
}

std::string default_images_dir() {
    if (const char* cache = std::getenv("SBX_CACHE_DIR"); cache != nullptr && *cache != '\0') {
        return cache;
    }
    if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0') {
        return std::string(xdg) + "/sandboxer";
    }
    const char* home = std::getenv("HOME");
    return std::string(home != nullptr ? home : "/root") + "/.cache/sandboxer";
}

// sbx-vmm: beside sbxd (an install), in the build tree sbxd was built in
// (build/host-tools/sbxd/sbxd -> build/host-tools/sbx-vmm/sbx-vmm), else on PATH.
std::string default_vmm_path() {
    std::error_code ec;
    auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (!ec) {
        for (const auto& candidate : {self.parent_path() / "sbx-vmm",
                                      self.parent_path().parent_path().parent_path() / "host-tools/sbx-vmm/sbx-vmm"}) {
            if (::access(candidate.c_str(), X_OK) == 0) {
                return candidate.string();
            }
        }
    }
    const char* path = std::getenv("PATH");
    std::string_view dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
    while (!dirs.empty()) {
        auto colon = dirs.find(':');
        std::string candidate = std::string(dirs.substr(0, colon)) + "/sbx-vmm";
        if (::access(candidate.c_str(), X_OK) == 0) {
            return candidate;
        }
        dirs = colon == std::string_view::npos ? std::string_view() : dirs.substr(colon + 1);
    }
    return "sbx-vmm";
}

int run_keys(Store& store, const std::string& command, const Options& options) {
    if (command == "create") {
        std::optional<std::string> scope;
        if (!options.key_sandbox.empty()) {
            scope = options.key_sandbox;
        }
        KeyLimits limits{options.key_read_only, std::nullopt};
        const UnixMillis now = system_now();
        if (!options.key_expires.empty()) {
            auto seconds = api::parse_duration(options.key_expires);
            if (!seconds) {
                std::fprintf(stderr, "sbxd: --expires: %s\n", seconds.error().to_string().c_str());
                return kExitKeysFailed;
            }
            limits.expires_at = now + *seconds * 1000;
        }
        auto key = make_api_key(options.key_name, scope, now, limits);
        if (!key) {
            std::fprintf(stderr, "sbxd: %s\n", key.error().to_string().c_str());
            return kExitKeysFailed;
        }
        if (auto added = store.add_api_key(key->record); !added) {
            std::fprintf(stderr, "sbxd: %s\n", added.error().to_string().c_str());
            return kExitKeysFailed;
        }
        std::fprintf(stderr, "sbxd: created API key %s (%s%s%s); it is shown only now\n", key->record.id.c_str(),
                     scope ? ("sandbox " + *scope).c_str() : "host-wide", limits.read_only ? ", read-only" : "",
                     limits.expires_at ? (", expires " + rfc3339(*limits.expires_at)).c_str() : "");
        std::cout << key->secret << std::endl;
        return 0;
    }
    if (command == "ls") {
        auto keys = store.list_api_keys();
        if (!keys) {
            std::fprintf(stderr, "sbxd: %s\n", keys.error().to_string().c_str());
            return kExitKeysFailed;
        }
        for (const auto& key : *keys) {
            std::cout << api_key_json(key).dump() << "\n";
        }
        return 0;
    }
    if (auto removed = store.remove_api_key(options.key_id); !removed) {
        std::fprintf(stderr, "sbxd: %s\n", removed.error().to_string().c_str());
        return kExitKeysFailed;
    }
    return 0;
}

// Drops expired idempotency keys, old history and events once an hour, on
// a worker (the store blocks).
void schedule_prune(asio::steady_timer& timer, asio::thread_pool& workers, Store& store) {
    timer.expires_after(std::chrono::hours(1));
    timer.async_wait([&timer, &workers, &store](boost::system::error_code ec) {
        if (ec) {
            return;
        }
        asio::post(workers, [&store] {
            if (auto pruned = store.prune(system_now()); !pruned) {
                log::warn("pruning the store: {}", pruned.error().to_string());
            }
        });
        schedule_prune(timer, workers, store);
    });
}

int serve(Store& store, const Options& options) {
    std::vector<http::ListenAddress> addresses;
    for (const auto& spec : options.listen.empty() ? std::vector<std::string>{"unix:/run/sandboxer/sbxd.sock"}
                                                   : options.listen) {
        auto address = http::parse_listen_address(spec);
        if (!address) {
            log::error("{}", address.error().to_string());
            return kExitStartFailed;
        }
        addresses.push_back(*address);
    }
    std::signal(SIGPIPE, SIG_IGN);

    asio::io_context io(1);
    const unsigned worker_count =
        options.workers != 0 ? options.workers : std::max(4U, std::thread::hardware_concurrency());
    asio::thread_pool workers(worker_count);
    const std::string images_dir = options.images_dir.empty() ? default_images_dir() : options.images_dir;
    DaemonInfo info{host_name(), kVersion, images_dir, api::detect_host_limits()};
    info.limits.max_sandboxes = options.max_running;
    info.limits.max_starts_per_minute = options.max_starts_per_minute;
    info.min_ttl_seconds = options.min_ttl_seconds;
    if (options.memory_budget_mib > 0) {
        info.limits.memory_budget_mib = options.memory_budget_mib;
    }
    DriverConfig config{std::filesystem::absolute(options.state_dir).string(),
                        options.vmm_path.empty() ? default_vmm_path() : options.vmm_path,
                        std::filesystem::absolute(images_dir).string(), info.limits};
    config.default_image = options.default_image;
    config.guest_api_socket = config.state_dir + "/guest-api.sock";
    for (const auto& pair : options.default_env) {
        const auto eq = pair.find('=');
        if (eq == std::string::npos || eq == 0) {
            log::error("--env '{}': must be K=V", pair);
            return kExitStartFailed;
        }
        config.default_env[pair.substr(0, eq)] = pair.substr(eq + 1);
    }
    if (auto checked = api::check_env(config.default_env); !checked) {
        log::error("--env: {}", checked.error().to_string());
        return kExitStartFailed;
    }
    config.boot_timeout = std::chrono::seconds(options.boot_timeout_s);
    config.restore_timeout = std::chrono::seconds(options.boot_timeout_s);
    if (!options.cpu_signature_override.empty()) {
        log::warn("--cpu-signature-override {}: memory saved on this host's CPU will not be restored",
                  options.cpu_signature_override);
        config.cpu_signature = options.cpu_signature_override;
    } else if (auto cpu = host_cpu_signature(); cpu) {
        config.cpu_signature = *cpu;
    } else {
        log::error("the host CPU's signature: {}", cpu.error().to_string());
        return kExitStartFailed;
    }
    std::unique_ptr<net::HostNetwork> network;
    if (options.network == "on") {
        net::HostNetworkConfig net_config;
        net_config.pool = options.net_pool;
        net_config.uplink = options.uplink;
        net_config.dns_upstreams = options.dns_upstreams;
        net_config.dns_rebind_ok = options.dns_rebind_ok;
        if (!options.dns_rebind_ok.empty()) {
            log::warn("--dns-rebind-ok: answers for those names skip the rebinding check (tests only)");
        }
        net_config.state_dir = config.state_dir;
        auto opened = net::HostNetwork::open(net_config);
        if (!opened) {
            log::error("the sandbox network: {} (--network off runs sandboxes without one)",
                       opened.error().to_string());
            return kExitStartFailed;
        }
        network = std::move(*opened);
        config.network = network.get();
        info.net_pool = network->pool();
        log::info("sandbox network {} out of {}", options.net_pool, network->uplink());
    }
    auto hosting = plan_hosting(options.hosting, config.state_dir);
    if (!hosting) {
        log::error("hosted ports: {} (--proxy-listen off serves none)", hosting.error().to_string());
        return kExitStartFailed;
    }
    if (*hosting) {
        info.proxy = (*hosting)->info;
        info.ca_pem = (*hosting)->ca_pem;
    }
    if (options.jail == "on") {
        config.jail_uid_base = options.jail_uid_base;
    }
    config.console_log_max_bytes = options.console_log_max_bytes;
    auto cgroups = prepare_cgroup_root(options.cgroup_root, config.state_dir);
    if (!cgroups) {
        log::error("{} (--cgroup-root off runs VMMs without cgroups)", cgroups.error().to_string());
        return kExitStartFailed;
    }
    config.cgroups = *cgroups;
    VmmDriver driver(store, config);
    // From here on sandboxes may be adopted onto the network: however this
    // sbxd ends, even failing to start, their taps and the egress table
    // stay for the next sbxd (docs/network.md, "Lifecycle").
    struct KeepNetworkForNextSbxd {
        net::HostNetwork* network;
        ~KeepNetworkForNextSbxd() {
            if (network) {
                network->release();
            }
        }
    } keep_network{network.get()};
    // Before the first request: every VMM an earlier sbxd left is adopted
    // or accounted for.
    auto adopted = driver.recover();
    if (!adopted) {
        log::error("recovering the sandboxes: {}", adopted.error().to_string());
        return kExitStartFailed;
    }
    log::info("sbx-vmm {}, images {}; {} running VMM(s) adopted", config.vmm_program, config.images_dir,
              *adopted);
    driver.watch_vmms();
    // The lifecycle timers stop through the driver, as POST .../stop does.
    LifecycleConfig lifecycle_config;
    lifecycle_config.idle_minute = std::chrono::seconds(options.idle_minute_seconds);
    LifecycleScheduler lifecycle(
        store,
        [&driver](const std::string& id, LifecycleAction action) -> Result<void> {
            api::StopRequest stop;
            stop.idle_pause = action == LifecycleAction::IdlePause;
            stop.reason = std::string(to_string(action));
            auto stopped = driver.stop(id, stop);
            if (!stopped) {
                return stopped.error();
            }
            return ok();
        },
        lifecycle_config, system_now);
    if (options.min_ttl_seconds != api::kMinTtlSeconds || options.idle_minute_seconds != 60) {
        log::warn("test-only lifecycle times: ttl from {} s, an idle minute is {} s", options.min_ttl_seconds,
                  options.idle_minute_seconds);
    }
    ApiService service(store, driver, info, system_now, &lifecycle);
    const McpEndpoint mcp(service, mcp::ServerInfo{"sandboxer", "Sandboxer", info.version, mcp::kInstructions},
                          options.mcp);
    service.serve_mcp([&mcp](const http::Request& request, const http::PathParams&) { return mcp.handle(request); });
    http::Server server(
        io, workers, [&service](http::Request request) { return service.handle(std::move(request)); },
        http::ServerLimits{}, [&service](const http::Request& request) { return service.streams_body(request); });
    std::optional<proxy::Proxy> proxy;
    if (*hosting) {
        auto backend = std::make_shared<HostedBackend>(store, service.guest(), info.net_pool, &lifecycle);
        auto started = start_hosting(io, **hosting, std::move(backend));
        if (!started) {
            log::error("hosted ports: {} (--proxy-listen off serves none)", started.error().to_string());
            return kExitStartFailed;
        }
        proxy = std::move(*started);
        log::info("hosted ports at https://<subdomain>-<port>.{}:{} ({} certificate)", info.proxy->domain,
                  info.proxy->url_port, info.ca_pem.empty() ? "the operator's" : "sbxd's own CA's");
    }
    const SocketAccess access = unix_socket_access(options.socket_group);
    for (const auto& address : addresses) {
        if (address.transport == http::Transport::Unix) {
            auto parent = std::filesystem::path(address.path).parent_path();
            std::error_code ec;
            if (!parent.empty() && !std::filesystem::exists(parent) &&
                (std::filesystem::create_directories(parent, ec), ec)) {
                log::error("creating {}: {}", parent.string(), ec.message());
                return kExitStartFailed;
            }
        }
        auto bound = server.listen(address, access);
        if (!bound) {
            log::error("{}", bound.error().to_string());
            return kExitStartFailed;
        }
        log::info("sbxd {} listening on {}{}", kVersion, *bound,
                  address.transport == http::Transport::Tcp ? " (API key required)" : "");
    }

    // What the sandboxes' guests reach over vsock (guest_api.hpp): the
    // VMMs connect, jailed ones as their own uids, through a hard link in
    // their vmm/ folder; 0666 behind the state directory's 0700.
    const SocketAccess guest_access{config.jail_uid_base ? 0666u : 0600u};
    if (auto bound = server.listen({http::Transport::Guest, config.guest_api_socket, "", 0}, guest_access);
        !bound) {
        log::error("{}", bound.error().to_string());
        return kExitStartFailed;
    }
    driver.offer_guest_api_to_running();  // links to that socket: it exists now

    asio::signal_set signals(io, SIGINT, SIGTERM);
    signals.async_wait([&](boost::system::error_code ec, int signal) {
        if (!ec) {
            log::info("signal {}: stopping", signal);
        }
        server.close();
        if (proxy) {
            proxy->close();
        }
        driver.cancel_starts();  // a wake or resume in flight ends now, not at its boot timeout
        io.stop();
    });
    asio::steady_timer prune_timer(io);
    asio::post(workers, [&store] { (void)store.prune(system_now()); });
    schedule_prune(prune_timer, workers, store);
    // Deadlines that passed while sbxd was down are met at once.
    lifecycle.start(io, [&workers](std::function<void()> work) { asio::post(workers, std::move(work)); });

    io.run();
    server.close();
    workers.join();
    return 0;  // the VMMs run on, on their taps; the next sbxd adopts them
}

}  // namespace

int main(int argc, char** argv) {
    Options options;
    CLI::App app{"sbxd: the Sandboxer host supervisor (REST/JSON API over HTTP/1.1)"};
    app.fallthrough();
    app.require_subcommand(0, 1);
    app.add_option("--state-dir", options.state_dir, "state: the database and one folder per sandbox")
        ->capture_default_str();
    app.add_option(
        "--listen", options.listen,
        "unix:PATH (default unix:/run/sandboxer/sbxd.sock) or tcp:HOST:PORT (API keys required); repeatable");
    app.add_option("--images", options.images_dir, "the guest images (default: the images/build cache)");
    app.add_option("--default-image", options.default_image, "the image a create without `from` boots")
        ->capture_default_str()
        ->check([](const std::string& name) {
            auto known = check_boot_image_name(name);
            return known ? std::string() : known.error().message;
        });
    app.add_option("--vmm", options.vmm_path,
                   "the sbx-vmm binary (default: beside sbxd, in its build tree, else on PATH)");
    app.add_option("--boot-timeout", options.boot_timeout_s,
                   "seconds a boot or restore may take to agent-ready")
        ->capture_default_str();
    app.add_option("--socket-group", options.socket_group, "group of the Unix socket (0660) when it exists")
        ->capture_default_str();
    app.add_option("--env", options.default_env,
                   "K=V for every sandbox's /etc/sandboxer/env, unless it was made with noEnv; repeatable");
    app.add_option("--workers", options.workers,
                   "worker threads for request handling (default: max(4, CPUs))");
    app.add_option("--max-running", options.max_running,
                   "sandboxes running at once (running, stopping and starting); past it 429 limit_reached")
        ->check(CLI::PositiveNumber)
        ->capture_default_str();
    app.add_option("--max-starts-per-minute", options.max_starts_per_minute,
                   "creates, resumes and fork children in any 60 s; past it 429 rate_limited")
        ->check(CLI::PositiveNumber)
        ->capture_default_str();
    app.add_option("--memory-budget-mib", options.memory_budget_mib,
                   "the sum of memoryMib of running sandboxes may not pass it (default: the host's memory "
                   "less 512 MiB); past it 503 capacity_exceeded")
        ->check(CLI::PositiveNumber);
    app.add_option("--cpu-signature-override", options.cpu_signature_override,
                   "test-only: use this as the host CPU's signature, so saved memory reports cpu_mismatch");
    app.add_option("--min-ttl-seconds", options.min_ttl_seconds,
                   "test-only: the shortest ttl a request may ask for (default 60)")
        ->check(CLI::Range(std::int64_t{1}, api::kMaxTtlSeconds));
    app.add_option("--idle-minute-seconds", options.idle_minute_seconds,
                   "test-only: how many seconds one idle minute lasts (default 60)")
        ->check(CLI::Range(1U, 60U));
    app.add_option("--cgroup-root", options.cgroup_root,
                   "each VMM in a cgroup v2 of its own under DIR, limited to its sandbox's CPUs (plus half of one), "
                   "memory (plus 256 MiB) and 512 tasks: auto (/sys/fs/cgroup/sandboxer when that is cgroup2), off, or DIR");
    app.add_option("--jail", options.jail,
                   "run each VMM jailed (sbx-vmm --jail: its own mount, IPC, UTS and network namespaces, only its "
                   "folder's vmm/ to see) as its own uid, --jail-uid-base plus its vsock CID")
        ->check(CLI::IsMember({"on", "off"}))
        ->capture_default_str();
    app.add_option("--jail-uid-base", options.jail_uid_base,
                   "the first jailed VMM uid and gid (a range no host account uses; the default is above "
                   "systemd's container ranges)")
        ->check(CLI::Range(1U, 0x7FF00000U))
        ->capture_default_str();
    app.add_option("--console-log-max-bytes", options.console_log_max_bytes,
                   "keep each sandbox's console log under this many bytes, dropping its oldest half when it "
                   "passes them (at least 4096; 0: no bound)")
        ->check(CLI::Validator(
            [](std::string& v) {
                return !v.empty() && v.find_first_not_of("0123456789") == std::string::npos && v.size() <= 18 &&
                               (v == "0" || std::stoull(v) >= 4096)
                           ? std::string()
                           : std::string("at least 4096, or 0");
            },
            "0|>=4096"))
        ->capture_default_str();
    app.add_option("--network", options.network,
                   "give sandboxes a network: a tap, a /30 from --net-pool, NAT out of --uplink, DNS on the "
                   "gateway, the egress policy of docs/network.md (on|off)")
        ->check(CLI::IsMember({"on", "off"}))
        ->capture_default_str();
    app.add_option("--net-pool", options.net_pool, "the IPv4 pool sandboxes get a /30 each from")
        ->capture_default_str();
    app.add_option("--uplink", options.uplink,
                   "the interface sandboxes reach the internet through (default: the IPv4 default route's)");
    app.add_option("--dns-upstream", options.dns_upstreams,
                   "an IPv4 DNS server the gateway forwards to (default: /etc/resolv.conf's); repeatable");
    app.add_option("--dns-rebind-ok", options.dns_rebind_ok,
                   "test-only: a domain whose answers skip the DNS rebinding check (the test internet's "
                   "addresses are documentation ranges, which the check refuses); repeatable");
    app.add_option("--proxy-listen", options.hosting.listen,
                   "where hosted ports are served over HTTPS: tcp:HOST:PORT, or off")
        ->capture_default_str();
    app.add_option("--proxy-domain", options.hosting.domain,
                   "hosted ports are https://<subdomain>-<port>.DOMAIN (*.localhost resolves to loopback)")
        ->capture_default_str();
    app.add_option("--proxy-cert", options.hosting.cert_path,
                   "the proxy's certificate chain (PEM, for *.DOMAIN); default: one from sbxd's own CA");
    app.add_option("--proxy-key", options.hosting.key_path, "the key of --proxy-cert (PEM)");
    app.add_option("--proxy-url-port", options.hosting.url_port,
                   "the port hosted URLs name, when it is not --proxy-listen's (a port forward in front)");
    app.add_option("--mcp-allowed-origin", options.mcp.allowed_origins,
                   "an Origin /mcp accepts besides loopback ones (https://ide.example.com); repeatable");
    app.add_option("--mcp-allowed-host", options.mcp.allowed_hosts,
                   "a Host name /mcp accepts on TCP besides loopback names and IP addresses; repeatable");
    auto* keys = app.add_subcommand("keys", "manage API keys for TCP listeners");
    keys->require_subcommand(1);
    auto* create = keys->add_subcommand("create", "make a key and print it (once) on stdout");
    create->add_option("--name", options.key_name, "a label for the key")->capture_default_str();
    create->add_option("--sandbox", options.key_sandbox, "scope the key to this sandbox");
    create->add_flag("--read-only", options.key_read_only, "GET and HEAD only (no change, no WebSocket)");
    create->add_option("--expires", options.key_expires, "refuse the key after this long (90s, 12h, 30d)");
    auto* list = keys->add_subcommand("ls", "list keys (never the secrets), JSON Lines");
    auto* remove = keys->add_subcommand("rm", "revoke a key");
    remove->add_option("id", options.key_id, "the key's id (key_...)")->required();
    CLI11_PARSE(app, argc, argv);

    if (auto made = make_directory(options.state_dir, 0700); !made) {
        log::error("state directory: {}", made.error().to_string());
        return kExitStartFailed;
    }
    auto store = Store::open(options.state_dir + "/sbxd.db");
    if (!store) {
        log::error("{}", store.error().to_string());
        return kExitStartFailed;
    }
    if (keys->parsed()) {
        std::string command = create->parsed() ? "create" : list->parsed() ? "ls" : "rm";
        return run_keys(**store, command, options);
    }
    return serve(**store, options);
}
