#include "say_output.h"

#include <cerrno>
#include <cmath>
#include <cstring>

#include "audio/audio_level.h"
#include "audio/time_stretch.h"
#include "core/error.h"

namespace cbx::cli {

namespace {
std::optional<AudioFormat> known_extension(const std::string& path) {
  try {
    return audio_format_from_path(path);
  } catch (const Error&) {
    return std::nullopt;
  }
}
}  // namespace

AudioFormat choose_format(const std::string& path, const std::string& format_flag, bool float_wav) {
  AudioFormat f;
  if (!format_flag.empty()) {
    f = audio_format_from_name(format_flag);
    // A known extension must agree: out.mp3 holding a WAV is the mistake this guards against.
    const std::optional<AudioFormat> ext = path == "-" ? std::nullopt : known_extension(path);
    CBX_CHECK(!ext || *ext == f || (*ext == AudioFormat::Wav && f == AudioFormat::WavFloat),
              "output '%s': its extension says %s but --format says %s", path.c_str(),
              ext ? audio_format_name(*ext) : "", audio_format_name(f));
  } else if (path == "-") {
    f = AudioFormat::Pcm16;
  } else {
    // No extension at all (-o /dev/null, -o out): a WAV; an extension we cannot write: an error.
    const size_t slash = path.find_last_of('/');
    const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
    const size_t dot = base.find_last_of('.');
    f = dot == std::string::npos || dot == 0 ? AudioFormat::Wav : audio_format_from_path(path);
  }
  if (float_wav) {
    CBX_CHECK(f == AudioFormat::Wav || f == AudioFormat::WavFloat, "--float is for WAV output (the format is %s)",
              audio_format_name(f));
    f = AudioFormat::WavFloat;
  }
  CBX_CHECK(audio_format_available(f), "this build's libsndfile cannot write %s", audio_format_name(f));
  return f;
}

AudioOutput::AudioOutput(const std::string& path, AudioFormat format, int sample_rate, const AudioPost& post,
                         const std::vector<OutputInput>& inputs)
    : path_(path), format_(format), sample_rate_(sample_rate), post_(post) {
  if (path == "-") {
    CBX_CHECK(!post.normalize_dbfs, "--normalize needs the whole audio: not with -o - (use --volume)");
    CBX_CHECK(audio_format_streamable(format), "%s cannot be streamed to stdout; write a file instead",
              audio_format_name(format));
  } else {
    file_ = std::make_unique<OutputFile>(path, inputs);
  }
}

const std::string& AudioOutput::target() const { return file_ ? file_->target() : path_; }

void AudioOutput::emit(const std::vector<uint8_t>& bytes) {
  if (bytes.empty()) return;
  if (std::fwrite(bytes.data(), 1, bytes.size(), stdout) != bytes.size() || std::fflush(stdout) != 0)
    fail("writing audio to stdout failed: %s", std::strerror(errno));
}

void AudioOutput::add(const float* x, size_t n, bool starts_chunk) {
  std::vector<float> chunk;
  if (post_.speed != 1.0)
    chunk = time_stretch(x, n, sample_rate_, post_.speed);
  else
    chunk.assign(x, x + n);
  if (post_.gain_db) apply_gain_db(chunk.data(), chunk.size(), *post_.gain_db);
  const size_t pause = starts_chunk && chunks_ > 0 ? size_t(std::llround(post_.pause_ms * sample_rate_ / 1000.0)) : 0;
  chunks_ += starts_chunk;
  samples_ += int64_t(pause + chunk.size());
  if (file_) {
    all_.insert(all_.end(), pause, 0.0f);
    all_.insert(all_.end(), chunk.begin(), chunk.end());
    return;
  }
  if (!stream_) stream_ = std::make_unique<AudioStreamEncoder>(format_, sample_rate_);
  if (pause > 0) {
    const std::vector<float> silence(pause, 0.0f);
    emit(stream_->push(silence.data(), silence.size()));
  }
  emit(stream_->push(chunk.data(), chunk.size()));
}

void AudioOutput::finish() {
  if (file_) {
    if (post_.normalize_dbfs) peak_normalize(all_.data(), all_.size(), *post_.normalize_dbfs);
    file_->write(encode_audio(all_.data(), all_.size(), sample_rate_, format_));
    file_->commit();
    return;
  }
  if (!stream_) stream_ = std::make_unique<AudioStreamEncoder>(format_, sample_rate_);
  emit(stream_->finish());
}

}  // namespace cbx::cli
