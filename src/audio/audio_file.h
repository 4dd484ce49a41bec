// Audio file I/O. Reading goes through libsndfile (WAV, FLAC, OGG/Vorbis/Opus, MP3 and the
// other formats the installed libsndfile supports) and returns mono float32 in [-1, 1]:
// channels are averaged as librosa.to_mono does, integer PCM is scaled as libsndfile's
// normalised float reads do (that is what soundfile/librosa.load see). Writing produces
// mono 16-bit PCM WAV (Chatterbox outputs 24 kHz), to a file, a byte buffer or, header
// first and then chunk by chunk, a raw stream.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace cbx {

// The highest sample rate read or written (1.536 MHz, 32x 48 kHz): the WAV writer refuses what
// the reader would refuse, so every file we write reads back.
constexpr int kMaxSampleRate = 1536000;

struct AudioData {
  std::vector<float> samples;  // mono, float32
  int sample_rate = 0;
  int file_channels = 0;   // channels in the file before the mono mix-down
  bool truncated = false;  // true when max_seconds cut the decode short
};

// Decode `path`. max_seconds > 0 decodes only the first max_seconds (memory stays bounded
// by that, whatever the file size). Throws cbx::Error naming the file when it is missing,
// unreadable, corrupt, in an unsupported format, or holds no samples.
AudioData read_audio(const std::string& path, double max_seconds = 0.0);
// Same, from an in-memory file image (e.g. an HTTP upload); `name` appears in errors.
AudioData read_audio_memory(const void* data, size_t size, const std::string& name, double max_seconds = 0.0);

// librosa.load(path, sr=target_rate): read_audio, then resample_soxr (soxr HQ) when the file
// rate differs. max_seconds > 0 bounds the decode at the file rate first; the last ~1 ms of
// the result then differs from resampling the whole file and cutting (filter look-ahead), so
// cut a little beyond what you keep when exact parity at the cut matters.
AudioData load_audio(const std::string& path, int target_rate, double max_seconds = 0.0);

// float -> int16: clamp to [-1, 1], scale by 32767, round to nearest (ties away from 0).
void float_to_pcm16(const float* x, size_t n, int16_t* out);
// 44-byte canonical RIFF/WAVE header for mono 16-bit PCM. With num_samples < 0 the
// RIFF and data sizes are set to 0xFFFFFFFF ("unknown length"), for streaming.
std::vector<uint8_t> wav_header_pcm16(int sample_rate, int64_t num_samples);
// Whole WAV file image (header + little-endian samples).
std::vector<uint8_t> encode_wav_pcm16(const float* x, size_t n, int sample_rate = 24000);
void write_wav_pcm16(const std::string& path, const float* x, size_t n, int sample_rate = 24000);
// Raw little-endian PCM16 bytes for a chunk of a stream (no header).
std::vector<uint8_t> encode_pcm16(const float* x, size_t n);

}  // namespace cbx
