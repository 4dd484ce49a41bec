// Request validation of `chatterbox serve`, apart from the HTTP layer so that the server and the
// fuzz targets (fuzz/fuzz_request_speech.cpp, fuzz/fuzz_audio_upload.cpp) run the same code:
//  * POST /v1/audio/speech: the raw body -> JSON -> a validated SpeechRequest;
//  * POST /v1/audio/voices: the multipart/form-data parts -> a validated VoiceUpload.
// Every refusal is an ApiError (server_util.h) with the status, message, param and code the
// client sees.
#pragma once
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "audio/audio_encode.h"
#include "chatterbox.h"
#include "server_engine.h"
#include "server_voices.h"

namespace httplib {
struct Request;
struct MultipartFormData;
}  // namespace httplib

namespace cbx::server {

// The model a request's "model" names among the loaded ones (OpenAI's tts-1, tts-1-hd and
// gpt-4o-mini-tts mean the first); -1 when none.
int model_index(const std::vector<const LoadedModel*>& models, const std::string& name);
// "chatterbox-turbo, ... (tts-1, tts-1-hd and gpt-4o-mini-tts mean chatterbox-turbo)", for messages.
std::string model_names(const std::vector<const LoadedModel*>& models);

// What validation needs to know about the server: its models (at least one), its saved voices
// and its limits.
struct RequestContext {
  std::vector<const LoadedModel*> models;
  VoiceStore* voices = nullptr;  // saved voices; may be a disabled store
  size_t max_body_bytes = 1 << 20;
  int max_input_chars = 4096;
};

// What a validated /v1/audio/speech request asks for.
struct SpeechRequest {
  int model = 0;  // index into RequestContext::models
  std::string text;
  std::shared_ptr<cbx_voice> voice;  // null: the model's built-in voice
  AudioFormat format = AudioFormat::Mp3;
  bool sse = false;
  double speed = 1;
  cbx_synth_params params{};
  std::string language;
};

// The body of POST /v1/audio/speech -> the request it asks for. Throws ApiError: 413 for a body
// over the limit, 400 naming the field for invalid JSON / UTF-8, wrong types, unknown models,
// voices or formats, out-of-range values (the CLI's and C API's ranges and messages); 500 when a
// saved voice exists but cannot be read.
SpeechRequest parse_speech_request(const std::string& body, const RequestContext& ctx);

// What a validated voice upload holds.
struct VoiceUpload {
  std::string name;                                  // a valid voice name (VoiceStore::name_problem)
  std::string filename;                              // the uploaded file's name, "upload" when none was sent
  const httplib::MultipartFormData* file = nullptr;  // the audio part (in the request)
  int model = 0;                                     // index into RequestContext::models
};

// The parts of POST /v1/audio/voices (fields name, file or audio_sample, optional model) -> the
// upload. Throws ApiError 400 naming the field (no voices directory, not multipart, a missing or
// invalid field, an empty file, an unknown model). Whether the audio makes a voice is decided
// later, by the model's engine.
VoiceUpload parse_voice_upload(const httplib::Request& req, const RequestContext& ctx);

}  // namespace cbx::server
