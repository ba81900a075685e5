#include "guest-agent/identity/identity_kernel.hpp"

#include <fcntl.h>
#include <linux/random.h>
#include <linux/rtnetlink.h>
#include <linux/vm_sockets.h>
#include <net/if.h>
#include <net/if_arp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <fstream>

#include "base/unique_fd.hpp"
#include "guest-agent/identity/rtnetlink.hpp"

namespace sbx::agent {
namespace {

static_assert(offsetof(rand_pool_info, buf) == 2 * sizeof(std::uint32_t));

Result<ifreq> interface_request(const std::string& ifname) {
    ifreq request{};
    if (ifname.empty() || ifname.size() >= sizeof request.ifr_name) {
        return make_error("bad interface name \"{}\"", ifname);
    }
    std::memcpy(request.ifr_name, ifname.data(), ifname.size());
    return request;
}

// Interface ioctls go through any socket to dev_ioctl (net/core/dev_ioctl.c).
Result<void> interface_ioctl(unsigned long request, ifreq& ifr, std::string_view what) {
    UniqueFd sock(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (!sock) {
        return sys_error("socket for interface ioctls");
    }
    if (::ioctl(sock.get(), request, &ifr) < 0) {
        return sys_error("{} of {}", what, ifr.ifr_name);
    }
    return ok();
}

Result<void> random_ioctl(unsigned long request, void* argument, std::string_view what) {
    UniqueFd fd(::open("/dev/urandom", O_WRONLY | O_CLOEXEC));
    if (!fd) {
        return sys_error("opening /dev/urandom");
    }
    if (::ioctl(fd.get(), request, argument) < 0) {
        return sys_error("{} on /dev/urandom", what);
    }
    return ok();
}

// The biggest resolv.conf read back (glibc reads any size; ours is ~150 bytes).
constexpr std::size_t kMaxResolvConf = std::size_t{64} * 1024;
// The biggest /etc/hosts or /etc/hostname read (the image's are ~200 bytes).
constexpr std::size_t kMaxEtcFile = std::size_t{1} << 20;

Result<int> interface_index(const std::string& ifname) {
    const unsigned index = ::if_nametoindex(ifname.c_str());
    if (index == 0) {
        return sys_error("no interface {}", ifname);
    }
    return static_cast<int>(index);
}

std::string interface_name(int index) {
    std::array<char, IF_NAMESIZE> name{};
    if (index <= 0 || ::if_indextoname(static_cast<unsigned>(index), name.data()) == nullptr) {
        return {};
    }
    return name.data();
}

DefaultRoute default_route(const rtnl::RouteEntry& entry) {
    DefaultRoute route;
    if (!entry.multipath) {
        route.gateway = entry.gateway;
        route.interface = interface_name(entry.oif);
    }
    route.metric = entry.metric;
    route.tos = entry.tos;
    return route;
}

class SystemIdentityKernel final : public IdentityKernel {
public:
    SystemIdentityKernel(std::filesystem::path sys_class_net, std::filesystem::path resolv_conf,
                         std::filesystem::path etc_dir)
        : sys_class_net_(std::move(sys_class_net)),
          resolv_conf_(std::move(resolv_conf)),
          etc_dir_(std::move(etc_dir)) {}

    Result<void> add_entropy(std::span<const std::uint8_t> seed) override {
        std::vector<std::uint32_t> words = rand_pool_info_words(seed);
        auto r =
            random_ioctl(RNDADDENTROPY, words.data(), "adding the seed to the kernel RNG (RNDADDENTROPY)");
        ::explicit_bzero(words.data(), words.size() * sizeof words[0]);
        return r;
    }

    Result<void> reseed_crng() override {
        return random_ioctl(RNDRESEEDCRNG, nullptr, "reseeding the kernel CRNG (RNDRESEEDCRNG)");
    }

    std::optional<std::uint32_t> local_cid() override {
        UniqueFd fd(::open("/dev/vsock", O_RDONLY | O_CLOEXEC));
        if (!fd) {
            return std::nullopt;
        }
        std::uint32_t cid = VMADDR_CID_ANY;
        if (::ioctl(fd.get(), IOCTL_VM_SOCKETS_GET_LOCAL_CID, &cid) < 0 || cid == VMADDR_CID_ANY) {
            return std::nullopt;
        }
        return cid;
    }

    std::optional<std::uint32_t> socket_cid(int fd) override {
        sockaddr_vm addr{};
        socklen_t len = sizeof addr;
        if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) < 0 || addr.svm_family != AF_VSOCK ||
            addr.svm_cid == VMADDR_CID_ANY) {
            return std::nullopt;
        }
        return addr.svm_cid;
    }

    std::optional<std::string> virtio_net_interface() override {
        auto names = virtio_net_interfaces(sys_class_net_);
        if (names.empty()) {
            return std::nullopt;
        }
        return names.front();
    }

    Result<MacAddress> hw_address(const std::string& ifname) override {
        auto ifr = interface_request(ifname);
        if (!ifr) {
            return ifr.error();
        }
        if (auto r = interface_ioctl(SIOCGIFHWADDR, *ifr, "reading the address (SIOCGIFHWADDR)"); !r) {
            return r.error();
        }
        if (ifr->ifr_hwaddr.sa_family != ARPHRD_ETHER) {
            return make_error("{} is not an Ethernet interface (type {})", ifname, ifr->ifr_hwaddr.sa_family);
        }
        MacAddress mac;
        std::memcpy(mac.data(), ifr->ifr_hwaddr.sa_data, mac.size());
        return mac;
    }

    Result<void> set_hw_address(const std::string& ifname, const MacAddress& mac) override {
        auto ifr = interface_request(ifname);
        if (!ifr) {
            return ifr.error();
        }
        // dev_set_mac_address wants sa_family == dev->type (EINVAL otherwise).
        ifr->ifr_hwaddr.sa_family = ARPHRD_ETHER;
        std::memcpy(ifr->ifr_hwaddr.sa_data, mac.data(), mac.size());
        return interface_ioctl(SIOCSIFHWADDR, *ifr, "setting the address (SIOCSIFHWADDR)");
    }

    Result<std::uint32_t> interface_flags(const std::string& ifname) override {
        auto ifr = interface_request(ifname);
        if (!ifr) {
            return ifr.error();
        }
        if (auto r = interface_ioctl(SIOCGIFFLAGS, *ifr, "reading the flags (SIOCGIFFLAGS)"); !r) {
            return r.error();
        }
        return static_cast<std::uint32_t>(static_cast<std::uint16_t>(ifr->ifr_flags));
    }

    Result<void> set_interface_flags(const std::string& ifname, std::uint32_t flags) override {
        auto ifr = interface_request(ifname);
        if (!ifr) {
            return ifr.error();
        }
        ifr->ifr_flags = static_cast<short>(flags);
        return interface_ioctl(SIOCSIFFLAGS, *ifr, "setting the flags (SIOCSIFFLAGS)");
    }

    Result<std::vector<Ipv4Prefix>> ipv4_addresses(const std::string& ifname) override {
        auto entries = address_entries(ifname);
        if (!entries) {
            return entries.error();
        }
        std::vector<Ipv4Prefix> addresses;
        addresses.reserve(entries->size());
        for (const auto& entry : *entries) {
            addresses.push_back(entry.local);
        }
        return addresses;
    }

    Result<void> add_ipv4_address(const std::string& ifname, const Ipv4Prefix& address) override {
        auto index = interface_index(ifname);
        auto socket = index ? rtnl::Socket::open() : Result<rtnl::Socket>(index.error());
        if (!socket) {
            return socket.error();
        }
        return with_name(socket->add_ipv4_address(*index, address), ifname);
    }

    // Deletes exactly the dumped entries with this local address and prefix
    // (IFA_ADDRESS included, so a peer address or the same address with
    // another prefix is not taken instead).
    Result<void> delete_ipv4_address(const std::string& ifname, const Ipv4Prefix& address) override {
        auto entries = address_entries(ifname);
        auto socket = entries ? rtnl::Socket::open() : Result<rtnl::Socket>(entries.error());
        if (!socket) {
            return socket.error();
        }
        for (const auto& entry : *entries) {
            if (entry.local != address) {
                continue;
            }
            // EADDRNOTAVAIL: gone since the dump (a secondary address goes with its primary).
            if (auto r = socket->delete_ipv4_address(entry); !r && r.error().errno_value != EADDRNOTAVAIL) {
                return with_name(std::move(r), ifname);
            }
        }
        return ok();
    }

    Result<std::vector<DefaultRoute>> ipv4_default_routes() override {
        auto entries = default_route_entries();
        if (!entries) {
            return entries.error();
        }
        std::vector<DefaultRoute> routes;
        routes.reserve(entries->size());
        for (const auto& entry : *entries) {
            routes.push_back(default_route(entry));
        }
        return routes;
    }

    Result<void> replace_ipv4_default_route(const std::string& ifname, Ipv4Address gateway) override {
        auto index = interface_index(ifname);
        auto socket = index ? rtnl::Socket::open() : Result<rtnl::Socket>(index.error());
        if (!socket) {
            return socket.error();
        }
        return with_name(socket->replace_ipv4_default_route(*index, gateway), ifname);
    }

    Result<void> delete_ipv4_default_route(const DefaultRoute& route) override {
        auto entries = default_route_entries();
        auto socket = entries ? rtnl::Socket::open() : Result<rtnl::Socket>(entries.error());
        if (!socket) {
            return socket.error();
        }
        for (const auto& entry : *entries) {
            if (default_route(entry) != route) {
                continue;
            }
            // ESRCH: gone since the dump.
            if (auto r = socket->delete_route(entry); !r && r.error().errno_value != ESRCH) {
                return r;
            }
        }
        return ok();
    }

    Result<ResolvConf> read_resolv_conf() override {
        ResolvConf conf;
        struct stat st {};
        if (::lstat(resolv_conf_.c_str(), &st) < 0) {
            if (errno == ENOENT) {
                return conf;
            }
            return sys_error("reading {}", resolv_conf_.string());
        }
        conf.exists = true;
        if (S_ISLNK(st.st_mode)) {
            conf.symlink = true;
            std::error_code ec;
            conf.target = std::filesystem::read_symlink(resolv_conf_, ec).string();
            if (auto text = read_file(resolv_conf_.string(), kMaxResolvConf)) {
                conf.text = std::move(*text);  // else a dangling link: no text
            }
            return conf;
        }
        if (!S_ISREG(st.st_mode)) {
            return errno_error(
                fmt::format("reading {}: not a regular file or a symbolic link", resolv_conf_.string()),
                EINVAL);
        }
        auto text = read_file(resolv_conf_.string(), kMaxResolvConf);
        if (!text) {
            return text.error();
        }
        conf.text = std::move(*text);
        return conf;
    }

    Result<void> write_resolv_conf(std::string_view text) override {
        return replace_file_atomically(resolv_conf_, text);
    }

    Result<std::string> hostname() override {
        struct utsname names {};
        if (::uname(&names) < 0) {
            return sys_error("uname");
        }
        return std::string(names.nodename);
    }

    Result<void> set_hostname(std::string_view name) override {
        if (::sethostname(name.data(), name.size()) < 0) {
            return sys_error("sethostname {}", name);
        }
        return ok();
    }

    Result<std::optional<std::string>> read_etc(EtcFile file) override {
        const std::filesystem::path path = etc_path(file);
        struct stat st {};
        if (::stat(path.c_str(), &st) < 0) {
            if (errno == ENOENT) {
                return std::optional<std::string>();
            }
            return sys_error("reading {}", path.string());
        }
        auto text = read_file(path.string(), kMaxEtcFile);
        if (!text) {
            return text.error();
        }
        return std::optional<std::string>(std::move(*text));
    }

    Result<void> write_etc(EtcFile file, std::string_view text) override {
        return replace_file_atomically(etc_path(file), text);
    }

private:
    static Result<void> with_name(Result<void> r, const std::string& ifname) {
        if (!r) {
            return r.error().context(ifname);
        }
        return r;
    }

    Result<std::vector<rtnl::AddressEntry>> address_entries(const std::string& ifname) {
        auto index = interface_index(ifname);
        auto socket = index ? rtnl::Socket::open() : Result<rtnl::Socket>(index.error());
        if (!socket) {
            return socket.error();
        }
        auto entries = socket->ipv4_addresses(*index);
        if (!entries) {
            return entries.error().context(ifname);
        }
        return entries;
    }

    static Result<std::vector<rtnl::RouteEntry>> default_route_entries() {
        auto socket = rtnl::Socket::open();
        if (!socket) {
            return socket.error();
        }
        auto routes = socket->ipv4_routes(RT_TABLE_MAIN);
        if (!routes) {
            return routes.error();
        }
        std::vector<rtnl::RouteEntry> defaults;
        for (const auto& route : *routes) {
            if (route.destination_length == 0) {
                defaults.push_back(route);
            }
        }
        return defaults;
    }

    [[nodiscard]] std::filesystem::path etc_path(EtcFile file) const {
        return etc_dir_ / (file == EtcFile::Hostname ? "hostname" : "hosts");
    }

    std::filesystem::path sys_class_net_;
    std::filesystem::path resolv_conf_;
    std::filesystem::path etc_dir_;
};

// Unlinks a temporary file unless it was renamed into place.
class TempFile {
public:
    explicit TempFile(std::string path) : path_(std::move(path)) {}
    TempFile(const TempFile&) = delete;
    TempFile& operator=(const TempFile&) = delete;
    TempFile(TempFile&&) = delete;
    TempFile& operator=(TempFile&&) = delete;
    ~TempFile() {
        if (!path_.empty()) {
            ::unlink(path_.c_str());
        }
    }
    [[nodiscard]] const std::string& path() const { return path_; }
    void keep() { path_.clear(); }

private:
    std::string path_;
};

}  // namespace

std::unique_ptr<IdentityKernel> make_system_identity_kernel(std::filesystem::path sys_class_net,
                                                            std::filesystem::path resolv_conf,
                                                            std::filesystem::path etc_dir) {
    return std::make_unique<SystemIdentityKernel>(std::move(sys_class_net), std::move(resolv_conf),
                                                  std::move(etc_dir));
}

Result<void> replace_file_atomically(const std::filesystem::path& path, std::string_view text) {
    const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : ".";
    std::string temp_name = (dir / ("." + path.filename().string() + ".sbx-XXXXXX")).string();
    UniqueFd fd(::mkostemp(temp_name.data(), O_CLOEXEC));
    if (!fd) {
        return sys_error("creating a temporary file in {} for {}", dir.string(), path.string());
    }
    TempFile temp(temp_name);
    if (::fchmod(fd.get(), 0644) < 0) {
        return sys_error("chmod 0644 {}", temp.path());
    }
    if (auto r = write_all(fd.get(), text.data(), text.size()); !r) {
        return r.error().context(fmt::format("writing {}", temp.path()));
    }
    if (::fsync(fd.get()) < 0) {
        return sys_error("fsync {}", temp.path());
    }
    fd.reset();
    if (::rename(temp.path().c_str(), path.c_str()) < 0) {
        return sys_error("renaming {} to {}", temp.path(), path.string());
    }
    temp.keep();
    UniqueFd dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!dir_fd || ::fsync(dir_fd.get()) < 0) {
        return sys_error("fsync {} (after renaming {} into it)", dir.string(), path.filename().string());
    }
    return ok();
}

std::vector<std::string> virtio_net_interfaces(const std::filesystem::path& sys_class_net) {
    std::vector<std::pair<long, std::string>> found;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(sys_class_net, ec)) {
        std::error_code link_ec;
        auto driver = std::filesystem::read_symlink(entry.path() / "device" / "driver", link_ec);
        if (link_ec || driver.filename() != "virtio_net") {
            continue;
        }
        long ifindex = -1;
        std::ifstream(entry.path() / "ifindex") >> ifindex;
        found.emplace_back(ifindex, entry.path().filename().string());
    }
    std::sort(found.begin(), found.end());
    std::vector<std::string> names;
    for (auto& [index, name] : found) {
        names.push_back(std::move(name));
    }
    return names;
}

std::vector<std::uint32_t> rand_pool_info_words(std::span<const std::uint8_t> seed) {
    std::vector<std::uint32_t> words(2 + (seed.size() + 3) / 4, 0);
    rand_pool_info header{};
    header.entropy_count = static_cast<int>(seed.size() * 8);
    header.buf_size = static_cast<int>(seed.size());
    std::memcpy(words.data(), &header, sizeof header);
    if (!seed.empty()) {
        std::memcpy(words.data() + 2, seed.data(), seed.size());
    }
    return words;
}

Result<bool> change_hw_address(IdentityKernel& kernel, const std::string& ifname, const MacAddress& mac) {
    auto live = kernel.set_hw_address(ifname, mac);
    if (live) {
        return false;
    }
    if (live.error().errno_value != EBUSY) {
        return live.error();
    }
    auto flags = kernel.interface_flags(ifname);
    if (!flags) {
        return flags.error();
    }
    if (auto down = kernel.set_interface_flags(ifname, *flags & ~static_cast<std::uint32_t>(IFF_UP)); !down) {
        return down.error().context("taking the link down to change its address");
    }
    auto set = kernel.set_hw_address(ifname, mac);
    auto up = kernel.set_interface_flags(ifname, *flags);
    if (!set) {
        return set.error();
    }
    if (!up) {
        return up.error().context("bringing the link up again after changing its address");
    }
    return true;
}

}  // namespace sbx::agent
