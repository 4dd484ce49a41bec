// libFuzzer target for voice uploads (POST /v1/audio/voices), from the bytes on the wire to the
// first model call. The input's first line is the multipart boundary, the rest the body; it goes
// as a whole HTTP request through cpp-httplib's request and multipart parsers (the server's), then
// through the server's parse_voice_upload (tools/server/server_request.h), the decode from memory
// (libsndfile: WAV, FLAC, Ogg, MP3, ...) capped as a build caps it (voice_decode_seconds), and, for
// Turbo's and Multilingual's recipes, voice_signals (checks, soxr to 24 and 16 kHz, loudness) and
// the network front-ends a build runs next: the S3 tokenizer log-mel (T3 prompt and S3Gen prompt),
// the voice encoder's silence trim and mel, the S3Gen prompt mel, the sinc resampler and CAMPPlus's
// Kaldi fbank, each only where the model would take the signal. Findings: an exception other than
// ApiError (4xx, OpenAI-shaped body) or cbx::Error (the server answers those 400 invalid_audio),
// a non-finite feature, a sanitizer report.
#include <httplib.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "audio/audio_file.h"
#include "audio/mel.h"
#include "audio/resample.h"
#include "core/error.h"
#include "models/model_config.h"
#include "pipeline/voice.h"
#include "server/server_http.h"
#include "server/server_request.h"
#include "server/server_util.h"

using namespace cbx::server;

namespace {

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "fuzz_audio_upload: %s\n", what.c_str());
  std::abort();
}

// One request in, the response out, no socket.
class MemoryStream : public httplib::Stream {
 public:
  explicit MemoryStream(const std::string& in) : in_(in) {}
  bool is_readable() const override { return true; }
  bool is_writable() const override { return true; }
  ssize_t read(char* p, size_t n) override {
    n = std::min(n, in_.size() - pos_);
    std::memcpy(p, in_.data() + pos_, n);
    pos_ += n;
    return ssize_t(n);
  }
  ssize_t write(const char* p, size_t n) override {
    out_.append(p, n);
    return ssize_t(n);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = "127.0.0.1";
    port = 1;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    ip = "127.0.0.1";
    port = 2;
  }
  socket_t socket() const override { return INVALID_SOCKET; }

 private:
  const std::string& in_;
  size_t pos_ = 0;
  std::string out_;
};

class FuzzServer : public httplib::Server {
 public:
  void handle(const std::string& request) {
    MemoryStream s(request);
    bool closed = false;
    process_request(s, true, closed, [](httplib::Request&) {});
  }
};

void check_finite(const std::vector<float>& x, const char* what) {
  for (float v : x)
    if (!std::isfinite(v)) finding(std::string("non-finite value in ") + what);
}

struct FrontEnds {
  cbx::S3TokenizerMel s3tok;
  cbx::VoiceEncoderMel ve;
  cbx::S3GenMel s3gen;
  cbx::KaldiFbank fbank;
  cbx::SincResampler sinc{24000, 16000};
};

// What VoiceBuilder::build_from_audio runs before each network, where the network would take it.
void front_ends(FrontEnds& fe, const cbx::VoiceSignals& sig) {
  constexpr int64_t kMinStft = cbx::S3TokenizerMel::kNFft / 2;  // the networks' own minimum
  if (sig.t3_samples > kMinStft) check_finite(fe.s3tok.compute(sig.ref16.data(), size_t(sig.t3_samples)), "T3 log-mel");
  const auto [b0, b1] = cbx::trim_silence(sig.ref16.data(), sig.ref16.size(), 20.0);
  if (int64_t(b1 - b0) > cbx::VoiceEncoderMel::kNFft / 2)
    check_finite(fe.ve.compute(sig.ref16.data() + b0, b1 - b0), "voice encoder mel");
  const size_t n24 = size_t(sig.s3gen_samples);
  check_finite(fe.s3gen.compute(sig.full.data(), n24), "S3Gen mel");
  const std::vector<float> s3_16 = fe.sinc.process(sig.full.data(), n24);
  check_finite(s3_16, "sinc 16 kHz");
  if (fe.fbank.num_frames(s3_16.size()) >= 3) check_finite(fe.fbank.compute(s3_16.data(), s3_16.size()), "fbank");
  if (int64_t(s3_16.size()) > kMinStft) check_finite(fe.s3tok.compute(s3_16.data(), s3_16.size()), "S3Gen log-mel");
}

struct Setup {
  LoadedModel turbo, mtl;
  std::string dir;
  std::unique_ptr<VoiceStore> voices;
  RequestContext ctx;
  cbx::VoiceRecipe recipes[2];
  FrontEnds fe;
  FuzzServer server;
  Setup() {
    turbo.id = "chatterbox-turbo", turbo.variant = "turbo";
    mtl.id = "chatterbox-multilingual", mtl.variant = "mtl";
    std::string tmpl = std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") + "/fuzz_upload_XXXXXX";
    if (!mkdtemp(tmpl.data())) finding("cannot make a temporary voices directory");
    dir = tmpl;
    voices = std::make_unique<VoiceStore>(dir);
    ctx.models = {&turbo, &mtl};
    ctx.voices = voices.get();
    recipes[0] = cbx::voice_recipe(cbx::default_config(cbx::Variant::Turbo), {}, "turbo");
    recipes[1] = cbx::voice_recipe(cbx::default_config(cbx::Variant::Mtl), {}, "mtl");
    const ServeOptions o;  // the server's default limits
    server.set_payload_max_length(std::max(o.max_body_bytes, o.max_upload_bytes));
    server.Post("/v1/audio/voices", [this](const httplib::Request& req, httplib::Response&) { upload(req); });
  }
  ~Setup() { rmdir(dir.c_str()); }

  void upload(const httplib::Request& req) {
    try {
      VoiceUpload u;
      try {
        u = parse_voice_upload(req, ctx);
      } catch (const ApiError& e) {
        if (e.status < 400 || e.status > 499) finding("status " + std::to_string(e.status) + ": " + e.what());
        const nlohmann::json j = nlohmann::json::parse(error_body(e.status, e.what(), e.param, e.code, e.type));
        if (!j.at("error").at("message").is_string()) finding("error body without a message");
        return;
      }
      const cbx::VoiceRecipe& r = recipes[u.model == 0 ? 0 : 1];
      cbx::AudioData a;
      try {
        a = cbx::read_audio_memory(u.file->content.data(), u.file->content.size(), u.filename,
                                   cbx::voice_decode_seconds(r));
      } catch (const cbx::Error&) {
        return;
      }
      if (a.sample_rate <= 0 || a.samples.empty()) finding("read_audio_memory returned no audio without an error");
      if (double(a.samples.size()) > cbx::voice_decode_seconds(r) * a.sample_rate + 1)
        finding("the decode went past its cap");
      for (const cbx::VoiceRecipe& rr : recipes) {
        cbx::VoiceSignals sig;
        try {
          sig = cbx::voice_signals(a, rr, u.filename);
        } catch (const cbx::Error&) {
          continue;
        }
        check_finite(sig.full, "24 kHz reference");
        check_finite(sig.ref16, "16 kHz reference");
        front_ends(fe, sig);
      }
    } catch (const std::exception& e) {
      finding(std::string("unexpected exception: ") + e.what());
    }
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Setup s;
  const std::string in(reinterpret_cast<const char*>(data), size);
  const size_t nl = in.find('\n');
  const std::string boundary = in.substr(0, std::min(nl, size_t(200)));
  const std::string body = nl == std::string::npos ? "" : in.substr(nl + 1);
  std::string req =
      "POST /v1/audio/voices HTTP/1.1\r\nHost: localhost\r\nContent-Type: multipart/form-data; boundary=" + boundary +
      "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  s.server.handle(req);
  return 0;
}
