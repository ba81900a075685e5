#include "host-tools/sbxd/proxy/error_page.hpp"

#include <ostream>

#include <boost/beast/http/status.hpp>

#include <fmt/core.h>

namespace sbx::sbxd::proxy {

std::string html_escape(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    for (char c : text) {
        switch (c) {
            case '&':
                out += "&amp;";
                break;
            case '<':
                out += "&lt;";
                break;
            case '>':
                out += "&gt;";
                break;
            case '"':
                out += "&quot;";
                break;
            case '\'':
                out += "&#39;";
                break;
            default:
                out.push_back(c);
        }
    }
    return out;
}

std::string error_page(unsigned status, std::string_view explanation) {
    std::string reason(boost::beast::http::obsolete_reason(static_cast<boost::beast::http::status>(status)));
    return fmt::format(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{0} {1}</title>"
        "<meta name=\"viewport\" content=\"width=device-width\"></head>\n"
        "<body style=\"font-family:sans-serif;max-width:40em;margin:4em auto;padding:0 1em\">\n"
        "<h1>{1}</h1>\n<p>{2}</p>\n<p style=\"color:#777\">Sandboxer \u00b7 HTTP {0}</p>\n</body></html>\n",
        status, html_escape(reason), html_escape(explanation));
}

}  // namespace sbx::sbxd::proxy
