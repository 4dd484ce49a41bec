// Where `chatterbox say` puts its audio: text chunks arrive one by one; each is sped up / slowed
// down (pitch kept), scaled, separated from the one before by a pause, and either streamed to
// stdout as it comes or collected and encoded into a file at the end.
#pragma once
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "audio/audio_encode.h"
#include "core/output_file.h"

namespace cbx::cli {

struct AudioPost {
  double speed = 1.0;                    // time_stretch; 1 = unchanged
  double pause_ms = 0;                   // silence between chunks
  std::optional<double> gain_db;         // --volume
  std::optional<double> normalize_dbfs;  // --normalize: the whole file's peak (files only)
};

class AudioOutput {
 public:
  // A file (prepared: checked and created now, written on finish) or "-" for stdout.
  AudioOutput(const std::string& path, AudioFormat format, int sample_rate, const AudioPost& post,
              const std::vector<OutputInput>& inputs);
  // Stdout: `format` streams (pcm, wav with an unknown-length header, ogg, opus, flac, mp3).
  static bool streams(AudioFormat f) { return audio_format_streamable(f); }

  // Audio of a text chunk, whole or (streaming) one piece of it: starts_chunk marks a text
  // chunk's first piece, which --pause-ms separates from the chunk before. On stdout it is
  // written (and flushed) before this returns.
  void add(const float* x, size_t n, bool starts_chunk = true);
  // Ends the audio: encodes and commits a file; flushes the stream's end on stdout.
  void finish();
  // Seconds of audio produced so far (after speed and pauses).
  double seconds() const { return double(samples_) / double(sample_rate_); }
  const std::string& path() const { return path_; }
  const std::string& target() const;  // the file written (symbolic links resolved)

 private:
  void emit(const std::vector<uint8_t>& bytes);

  std::string path_;
  AudioFormat format_;
  int sample_rate_;
  AudioPost post_;
  std::unique_ptr<OutputFile> file_;            // a file: written on finish
  std::unique_ptr<AudioStreamEncoder> stream_;  // stdout
  std::vector<float> all_;                      // a file's samples until finish
  int64_t samples_ = 0;
  int64_t chunks_ = 0;
};

// The format for `path`: --format when given (checked against a known extension of path), else
// the extension (none: WAV; one no writer has: an error); "-" (stdout) defaults to raw 16-bit
// PCM. float_wav turns wav into 32-bit float.
AudioFormat choose_format(const std::string& path, const std::string& format_flag, bool float_wav);

}  // namespace cbx::cli
