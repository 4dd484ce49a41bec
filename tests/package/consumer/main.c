/* A program that embeds chatterbox.cpp through its installed C API only (tests/package/).
 * Usage: consumer [MODEL.gguf]. Checks the version calls and a failing load; with a model,
 * synthesizes one sentence. Exit 0 when everything holds, 1 otherwise. */
#include <chatterbox.h>
#include <stdio.h>
#include <string.h>

static int fail(const char* what) {
  fprintf(stderr, "consumer: %s (last error: %s)\n", what, cbx_last_error());
  return 1;
}

int main(int argc, char** argv) {
  if (cbx_api_version() != CBX_API_VERSION) return fail("cbx_api_version differs from the header's");
  const char* version = cbx_version();
  if (!version || !*version) return fail("empty cbx_version");
  printf("chatterbox %s\n", version);

  cbx_model_params mp = cbx_model_default_params();
  mp.n_threads = 1;
  cbx_model* model = NULL;
  if (cbx_model_load("/nonexistent/consumer-model.gguf", &mp, &model) != CBX_ERR_MODEL_LOAD || model)
    return fail("loading a missing file did not fail with CBX_ERR_MODEL_LOAD");
  if (!strstr(cbx_last_error(), "consumer-model.gguf")) return fail("the load error does not name the file");

  if (argc < 2) return 0;
  if (cbx_model_load(argv[1], &mp, &model) != CBX_OK) return fail("cbx_model_load");
  cbx_synth_params sp = cbx_synth_default_params();
  sp.seed = 1;
  float* audio = NULL;
  size_t n = 0;
  cbx_status st = cbx_synthesize(model, "Hello.", &sp, &audio, &n, NULL);
  int32_t rate = cbx_model_sample_rate(model);
  cbx_audio_free(audio);
  cbx_model_free(model);
  if (st != CBX_OK) return fail("cbx_synthesize");
  if (n == 0) return fail("cbx_synthesize gave no samples");
  printf("synthesized %zu samples at %d Hz\n", n, (int)rate);
  return 0;
}
