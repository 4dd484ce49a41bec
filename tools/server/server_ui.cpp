#include "server_ui.h"

#include <httplib.h>

#include <cstddef>

namespace cbx::server {

// Generated from tools/server/ui/index.html (CMakeLists.txt, cmake/embed_file.cmake).
extern const unsigned char kUiIndexHtml[];
extern const size_t kUiIndexHtml_size;

void add_ui_routes(httplib::Server& s) {
  auto page = [](const httplib::Request&, httplib::Response& res) {
    // The script and style are inline (one file); everything else may come from this server only,
    // and recorded or generated audio from blob: URLs the page makes.
    res.set_header("Content-Security-Policy",
                   "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                   "connect-src 'self' blob:; media-src 'self' blob:; img-src 'self' data:; base-uri 'none'; "
                   "form-action 'none'; frame-ancestors 'none'");
    res.set_header("X-Content-Type-Options", "nosniff");
    res.set_header("Referrer-Policy", "no-referrer");
    res.set_header("Cache-Control", "no-cache");
    res.set_content(reinterpret_cast<const char*>(kUiIndexHtml), kUiIndexHtml_size, "text/html; charset=utf-8");
  };
  s.Get("/", page);
  s.Get("/index.html", page);
}

}  // namespace cbx::server
