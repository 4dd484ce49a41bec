// Audio encoders: mono float samples -> complete file bytes in memory (for `say -o` and HTTP
// responses), plus a chunk-by-chunk stream encoder. WAV 16-bit and raw PCM use the writers in
// audio_file.h; the other formats go through libsndfile's writers on virtual I/O.
//
// Formats, their names (audio_format_from_name), extensions (audio_format_from_path) and defaults:
//   wav        .wav         16-bit PCM WAV (same bytes as encode_wav_pcm16)
//   wav-float  (name only)  32-bit IEEE float WAV (libsndfile; carries fact and PEAK chunks)
//   flac       .flac        16-bit FLAC, compression level 5 (libFLAC's default)
//   ogg        .ogg .oga    Ogg/Vorbis, VBR quality 0.5 (oggenc -q 5)
//   opus       .opus        Ogg/Opus, 48 kbit/s (transparent-ish for mono speech); the sample
//                           rate must be 8, 12, 16, 24 or 48 kHz
//   mp3        .mp3         MPEG layer III (LAME), VBR quality 4 (lame -V 4, LAME's default) with
//                           the Info tag (gapless: decoders trim delay and padding); the sample
//                           rate must be one MP3 has (8, 11.025, 12, 16, 22.05, 24, 32, 44.1 or
//                           48 kHz)
//   pcm        .pcm .raw    raw 16-bit little-endian PCM, no header
// Input samples are nominally in [-1, 1]: every format clips to that range (never wraps) and
// turns NaN into silence; 16-bit formats quantise with float_to_pcm16.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace cbx {

enum class AudioFormat { Wav, WavFloat, Flac, OggVorbis, Opus, Mp3, Pcm16 };

// "wav", "wav-float" (also "wav32f"), "flac", "ogg" (also "vorbis"), "opus", "mp3", "pcm" (also
// "raw"); case-insensitive. Throws cbx::Error naming the unknown name and listing the supported.
AudioFormat audio_format_from_name(const std::string& name);
// By the extension of `path` (case-insensitive): .wav .flac .ogg .oga .opus .mp3 .pcm .raw.
// A missing or unsupported extension throws cbx::Error naming it and listing the supported ones.
AudioFormat audio_format_from_path(const std::string& path);
// The canonical name ("wav", "wav-float", "flac", "ogg", "opus", "mp3", "pcm").
const char* audio_format_name(AudioFormat f);
// The canonical file extension with its dot (".wav", ".wav", ".flac", ".ogg", ...).
const char* audio_format_extension(AudioFormat f);
// MIME type for an HTTP Content-Type: audio/wav, audio/flac, audio/ogg, "audio/ogg; codecs=opus",
// audio/mpeg, audio/pcm (raw PCM; not audio/L16, which RFC 2586 defines as big-endian).
const char* audio_format_mime(AudioFormat f);
// Whether the linked libsndfile can write the format (its SFC_GET_FORMAT_MAJOR/SUBTYPE lists
// hold the container and codec); Wav and Pcm16 are written here and always available.
bool audio_format_available(AudioFormat f);

// Whole file image of mono `x` (n > 0 samples) at sample_rate in format f. Throws cbx::Error
// naming the format and the problem (no samples, unsupported sample rate, codec missing, encoder
// failure).
std::vector<uint8_t> encode_audio(const float* x, size_t n, int sample_rate, AudioFormat f);
// Same, written to `path` (the format is the caller's choice, e.g. audio_format_from_path).
void write_audio(const std::string& path, const float* x, size_t n, int sample_rate, AudioFormat f);

// 44-byte WAV header for a 16-bit mono PCM stream of unknown length (RIFF and data sizes
// 0xFFFFFFFF); the samples follow as encode_pcm16 chunks.
std::vector<uint8_t> wav_stream_header(int sample_rate);

// Whether AudioStreamEncoder supports f: every format but WavFloat. How each streams (the bytes
// of a stream never depend on how the input was chunked):
//  * wav: wav_stream_header, then PCM16 chunks; pcm: PCM16 chunks.
//  * ogg: libsndfile never seeks back; same codec bytes as encode_audio (up to the Ogg serial
//    number, random per stream). libogg sends ~4 KB pages (about 0.5 s of speech at the
//    default quality).
//  * opus: as ogg, with 100 ms pages (encode_audio: 1 s); the decoded samples are the same.
//  * flac: libFLAC rewrites STREAMINFO at the end (total samples, MD5, frame sizes); in a stream
//    that part has already gone out, so it keeps the "unknown" values (0), as FLAC allows.
//  * mp3: constant bitrate (64 kbit/s at 8-24 kHz, 128 kbit/s at 32-48 kHz), not encode_audio's
//    VBR: LAME fills its Info frame only at the end, and in a stream that frame stays blank.
//    Decoders then play it as one frame of silence (576 samples below 32 kHz, 1152 above) and do
//    not trim the encoder delay (1105 samples) or the end padding; a reader that estimates the
//    length from the first frame's bitrate (libsndfile does) gets it right only at a constant
//    bitrate.
// The end-of-stream fix-ups still land when finish() comes before any bytes were handed out.
bool audio_format_streamable(AudioFormat f);

// Chunk-by-chunk encoder: push() returns the bytes ready so far (possibly none: codecs buffer a
// block), finish() the rest; their concatenation is a complete file. Not copyable; one thread.
class AudioStreamEncoder {
 public:
  // Throws cbx::Error for a format that cannot stream (see above) or a bad sample rate.
  AudioStreamEncoder(AudioFormat f, int sample_rate);
  ~AudioStreamEncoder();
  AudioStreamEncoder(const AudioStreamEncoder&) = delete;
  AudioStreamEncoder& operator=(const AudioStreamEncoder&) = delete;

  std::vector<uint8_t> push(const float* x, size_t n);
  // Flushes the codec and closes the stream; push/finish after it throw, and so does finish()
  // when no samples were pushed.
  std::vector<uint8_t> finish();
  AudioFormat format() const { return format_; }

 private:
  struct Impl;
  AudioFormat format_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cbx
