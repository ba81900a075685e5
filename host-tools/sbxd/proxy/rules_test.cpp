// The proxy's pure rules: host names, tokens and cookies, forwarded
// headers, error pages.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include <boost/beast/http/fields.hpp>

#include "host-tools/sbxd/proxy/auth.hpp"
#include "host-tools/sbxd/proxy/error_page.hpp"
#include "host-tools/sbxd/proxy/forwarding.hpp"
#include "host-tools/sbxd/proxy/host_name.hpp"

using namespace sbx::sbxd::proxy;
namespace bhttp = boost::beast::http;

TEST_CASE("hosted names split at the first label's last hyphen") {
    auto name = parse_hosted_name("sbx-00ff-8080.sbx.localhost", "sbx.localhost");
    REQUIRE(name.has_value());
    CHECK(name->subdomain == "sbx-00ff");
    CHECK(name->port == 8080);
    auto with_port = parse_hosted_name("App1-3000.SBX.localhost:8443", "sbx.localhost");
    REQUIRE(with_port.has_value());
    CHECK(with_port->subdomain == "app1");
    CHECK(with_port->port == 3000);
    CHECK(parse_hosted_name("a-1.sbx.localhost", "sbx.localhost")->port == 1);
    CHECK(parse_hosted_name("a-65535.sbx.localhost", "sbx.localhost")->port == 65535);
}

TEST_CASE("names that are not hosted ports") {
    for (const char* host :
         {"sbx.localhost", "app.sbx.localhost", "app-0.sbx.localhost", "app-65536.sbx.localhost",
          "app-080.sbx.localhost", "-80.sbx.localhost", "a.b-80.sbx.localhost", "app-80.other.localhost",
          "app-80.xsbx.localhost", "app_x-80.sbx.localhost", "app--80.sbx.localhost", "app-80.sbx.localhost:",
          "app-80.sbx.localhost:x1", "app-80.sbx.localhost.", "app-8o.sbx.localhost", ""}) {
        CAPTURE(host);
        CHECK_FALSE(parse_hosted_name(host, "sbx.localhost").has_value());
    }
    CHECK_FALSE(parse_hosted_name(std::string(64, 'a') + "-80.sbx.localhost", "sbx.localhost").has_value());
}

TEST_CASE("service words stand where the port does, and only those given") {
    const std::vector<std::string> services{"desktop", "view"};
    auto desktop = parse_hosted_name("3f9a0c1d2e-Desktop.sbx.localhost:8443", "sbx.localhost", services);
    REQUIRE(desktop.has_value());
    CHECK(desktop->subdomain == "3f9a0c1d2e");
    CHECK(desktop->service == "desktop");
    CHECK(desktop->port == 0);
    CHECK(parse_hosted_name("a-b-view.sbx.localhost", "sbx.localhost", services)->subdomain == "a-b");
    CHECK(parse_hosted_name("a-8080.sbx.localhost", "sbx.localhost", services)->service.empty());
    CHECK_FALSE(parse_hosted_name("a-desktop.sbx.localhost", "sbx.localhost").has_value());
    for (const char* host : {"a-viewer.sbx.localhost", "-desktop.sbx.localhost", "desktop.sbx.localhost",
                             "a-desktop.other.localhost", "x.a-desktop.sbx.localhost"}) {
        CAPTURE(host);
        CHECK_FALSE(parse_hosted_name(host, "sbx.localhost", services).has_value());
    }
}

TEST_CASE("domains") {
    CHECK(is_valid_domain("sbx.localhost"));
    CHECK(is_valid_domain("example"));
    CHECK_FALSE(is_valid_domain(""));
    CHECK_FALSE(is_valid_domain("sbx..localhost"));
    CHECK_FALSE(is_valid_domain("sbx.localhost."));
    CHECK_FALSE(is_valid_domain("*.sbx.localhost"));
}

TEST_CASE("the _token parameter comes out of the target") {
    auto only = take_query_token("/app?_token=s3cr%2Bt");
    REQUIRE(only.has_value());
    CHECK(only->token == "s3cr+t");
    CHECK(only->target_without == "/app");
    auto middle = take_query_token("/x/y?a=1&_token=t&b=2&_token=u");
    REQUIRE(middle.has_value());
    CHECK(middle->token == "t");
    CHECK(middle->target_without == "/x/y?a=1&b=2");
    CHECK(take_query_token("/?_token=")->token.empty());
    CHECK_FALSE(take_query_token("/app").has_value());
    CHECK_FALSE(take_query_token("/app?x_token=1&token=2").has_value());
}

TEST_CASE("secrets compare whole") {
    CHECK(same_secret("abc", "abc"));
    CHECK_FALSE(same_secret("abc", "abd"));
    CHECK_FALSE(same_secret("abc", "abcd"));
    CHECK_FALSE(same_secret("", "a"));
}

TEST_CASE("the cookie is host-only") {
    auto cookie = auth_cookie("tok");
    CHECK(cookie == "__sbx_auth=tok; Path=/; HttpOnly; Secure; SameSite=Lax");
    CHECK(cookie.find("Domain") == std::string::npos);
}

TEST_CASE("credentials: cookie, bearer, X-Sbx-Auth") {
    bhttp::fields cookie;
    cookie.set(bhttp::field::cookie, "theme=dark; __sbx_auth=tok; lang=en");
    CHECK(carries_token(cookie, "tok"));
    CHECK_FALSE(carries_token(cookie, "other"));
    CHECK_FALSE(carries_token(cookie, ""));
    bhttp::fields bearer;
    bearer.set(bhttp::field::authorization, "bearer  tok");
    CHECK(carries_token(bearer, "tok"));
    bhttp::fields basic;
    basic.set(bhttp::field::authorization, "Basic dG9rOg==");
    CHECK_FALSE(carries_token(basic, "tok"));
    bhttp::fields header;
    header.set("x-sbx-auth", "tok");
    CHECK(carries_token(header, "tok"));
    bhttp::fields wrong_then_right;
    wrong_then_right.insert(bhttp::field::cookie, "__sbx_auth=nope");
    wrong_then_right.insert(bhttp::field::cookie, "__sbx_auth=\"tok\"");
    CHECK(carries_token(wrong_then_right, "tok"));
}

TEST_CASE("secrets are stripped, the app's own credentials kept") {
    bhttp::fields headers;
    headers.insert(bhttp::field::cookie, "theme=dark; __sbx_auth=tok; lang=en");
    headers.insert(bhttp::field::cookie, "__sbx_auth=tok");
    headers.set("X-Sbx-Auth", "tok");
    headers.set(bhttp::field::authorization, "Bearer tok");
    strip_credentials(headers, "tok");
    CHECK(headers.count(bhttp::field::cookie) == 1);
    CHECK(headers[bhttp::field::cookie] == "theme=dark; lang=en");
    CHECK(headers.count("X-Sbx-Auth") == 0);
    CHECK(headers.count(bhttp::field::authorization) == 0);

    bhttp::fields app;
    app.set(bhttp::field::authorization, "Bearer the-apps-own");
    strip_credentials(app, "tok");
    CHECK(app[bhttp::field::authorization] == "Bearer the-apps-own");
}

TEST_CASE("hop-by-hop fields go, framing stays") {
    bhttp::fields headers;
    headers.set(bhttp::field::connection, "keep-alive, X-Secret, Content-Length, host");
    headers.set("X-Secret", "1");
    headers.set(bhttp::field::keep_alive, "timeout=5");
    headers.set(bhttp::field::upgrade, "h2c");
    headers.set(bhttp::field::te, "trailers");
    headers.set(bhttp::field::content_length, "3");
    headers.set(bhttp::field::host, "a-1.sbx.localhost");
    headers.set("X-Kept", "yes");
    strip_hop_by_hop(headers);
    CHECK(headers.count(bhttp::field::connection) == 0);
    CHECK(headers.count("X-Secret") == 0);
    CHECK(headers.count(bhttp::field::keep_alive) == 0);
    CHECK(headers.count(bhttp::field::upgrade) == 0);
    CHECK(headers.count(bhttp::field::te) == 0);
    CHECK(headers[bhttp::field::content_length] == "3");
    CHECK(headers[bhttp::field::host] == "a-1.sbx.localhost");
    CHECK(headers["X-Kept"] == "yes");
}

TEST_CASE("X-Forwarded-For appends") {
    bhttp::fields headers;
    headers.insert("X-Forwarded-For", "203.0.113.7");
    headers.insert("X-Forwarded-For", "198.51.100.2");
    headers.set("X-Forwarded-Proto", "http");
    add_forwarded_fields(headers, "127.0.0.1", "a-1.sbx.localhost:8443");
    CHECK(headers.count("X-Forwarded-For") == 1);
    CHECK(headers["X-Forwarded-For"] == "203.0.113.7, 198.51.100.2, 127.0.0.1");
    CHECK(headers["X-Forwarded-Proto"] == "https");
    CHECK(headers["X-Forwarded-Host"] == "a-1.sbx.localhost:8443");
    bhttp::fields fresh;
    add_forwarded_fields(fresh, "::1", "h");
    CHECK(fresh["X-Forwarded-For"] == "::1");
}

TEST_CASE("error pages end with the Sandboxer line") {
    auto page = error_page(502, "Nothing <listens> yet.");
    CHECK(page.find("<title>502 Bad Gateway</title>") != std::string::npos);
    CHECK(page.find("Nothing &lt;listens&gt; yet.") != std::string::npos);
    CHECK(page.find("Sandboxer \xc2\xb7 HTTP 502</p>\n</body></html>\n") != std::string::npos);
}
