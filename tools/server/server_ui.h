// The web page of `chatterbox serve` (GET /): tools/server/ui/index.html, compiled into the binary
// by cmake/embed_file.cmake. The page uses only the public endpoints (docs/server.md).
#pragma once

namespace httplib {
class Server;
}

namespace cbx::server {

// Adds GET / and GET /index.html answering the page, with a Content-Security-Policy that lets it
// reach this server only (no other origin, no frames, no plugins).
void add_ui_routes(httplib::Server& s);

}  // namespace cbx::server
