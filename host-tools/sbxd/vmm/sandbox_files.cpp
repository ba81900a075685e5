#include "host-tools/sbxd/vmm/sandbox_files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/unique_fd.hpp"

namespace sbx::sbxd {

namespace fs = std::filesystem;

SandboxFiles::SandboxFiles(const std::string& state_dir, const std::string& sandbox_id)
    : dir_(state_dir + "/sandboxes/" + sandbox_id) {}

SandboxFiles SandboxFiles::in_dir(std::string dir) {
    SandboxFiles files;
    files.dir_ = std::move(dir);
    return files;
}

Result<void> SandboxFiles::create() const {
    std::error_code ec;
    fs::create_directories(fs::path(dir_).parent_path(), ec);
    if (ec) {
        return make_error("creating {}: {}", fs::path(dir_).parent_path().string(), ec.message());
    }
    if (::mkdir(dir_.c_str(), 0700) != 0) {
        return sys_error("creating the sandbox folder {}", dir_);
    }
    return ok();
}

Result<void> SandboxFiles::prepare_vmm_dir(std::optional<std::uint32_t> jail_id) const {
    const std::string vmm = vmm_dir();
    if (::mkdir(vmm.c_str(), 0700) != 0 && errno != EEXIST) {
        return sys_error("creating {}", vmm);
    }
    // The jail binds vmm/ alone at its own path (below root-owned 0755
    // folders of its own), so the folder stays 0700.
    if (jail_id && ::chown(vmm.c_str(), *jail_id, *jail_id) != 0) {
        return sys_error("giving {} to uid {}", vmm, *jail_id);
    }
    return ok();
}

Result<void> SandboxFiles::remove() const {
    std::error_code ec;
    fs::remove_all(dir_, ec);
    if (ec) {
        return make_error("removing {}: {}", dir_, ec.message());
    }
    return ok();
}

std::vector<std::string> read_lines(const std::string& path) {
    std::vector<std::string> lines;
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) {
        if (!line.empty()) {
            lines.push_back(line);
        }
    }
    return lines;
}

Result<void> write_lines(const std::string& path, const std::vector<std::string>& lines) {
    const std::string temp = path + ".tmp";
    {
        std::ofstream out(temp, std::ios::trunc);
        for (const auto& line : lines) {
            out << line << "\n";
        }
        if (!out.flush()) {
            return make_error("writing {}", temp);
        }
    }
    if (::rename(temp.c_str(), path.c_str()) != 0) {
        return sys_error("renaming {}", temp);
    }
    return ok();
}

bool SandboxFiles::has_memory() const {
    struct stat st{};
    return ::stat(memory().c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

Result<void> SandboxFiles::write_vmm(const VmmFile& vmm) const {
    nlohmann::json j = {{"token", vmm.token},
                        {"cid", vmm.cid},
                        {"uds", vsock_socket()},
                        {"pid", vmm.process.pid},
                        {"startTime", vmm.process.start_time},
                        {"control", vmm.process.control_socket}};
    const std::string text = j.dump() + "\n";
    const std::string temp = vmm_file() + ".tmp";
    auto fd = UniqueFd::open(temp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (!fd) {
        return fd.error();
    }
    if (::write(fd->get(), text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
        return sys_error("writing {}", temp);
    }
    if (::fsync(fd->get()) != 0) {
        return sys_error("fsync of {}", temp);
    }
    if (::rename(temp.c_str(), vmm_file().c_str()) != 0) {
        return sys_error("renaming {} to {}", temp, vmm_file());
    }
    return ok();
}

Result<VmmFile> SandboxFiles::read_vmm() const {
    std::ifstream in(vmm_file());
    if (!in) {
        return make_coded_error("not_found", "no {}", vmm_file());
    }
    std::stringstream text;
    text << in.rdbuf();
    auto j = nlohmann::json::parse(text.str(), nullptr, false);
    auto field = [&](const char* key) { return j.is_object() ? j.find(key) : j.end(); };
    auto token = field("token"), cid = field("cid"), pid = field("pid"), start = field("startTime"),
         control = field("control");
    if (j.is_discarded() || !j.is_object() || token == j.end() || !token->is_string() || cid == j.end() ||
        !cid->is_number_unsigned() || pid == j.end() || !pid->is_number_integer() || start == j.end() ||
        !start->is_number_integer() || control == j.end() || !control->is_string()) {
        return make_error("{} is damaged", vmm_file());
    }
    VmmFile vmm;
    vmm.token = token->get<std::string>();
    vmm.cid = cid->get<std::uint32_t>();
    vmm.process = VmmProcess{pid->get<std::int64_t>(), start->get<std::int64_t>(), control->get<std::string>()};
    return vmm;
}

std::string log_tail(const std::string& path, std::size_t max_bytes) {
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    if (!in) {
        return {};
    }
    auto size = static_cast<std::size_t>(in.tellg());
    std::size_t from = size > max_bytes ? size - max_bytes : 0;
    in.seekg(static_cast<std::streamoff>(from));
    std::string text(size - from, '\0');
    in.read(text.data(), static_cast<std::streamsize>(text.size()));
    for (char& c : text) {
        if ((static_cast<unsigned char>(c) < 0x20 && c != '\n') || c == 0x7f) {
            c = '?';
        }
    }
    return text;
}

}  // namespace sbx::sbxd
