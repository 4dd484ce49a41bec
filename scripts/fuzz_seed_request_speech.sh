#!/usr/bin/env bash
# Writes request bodies of POST /v1/audio/speech into a fuzz corpus directory (seeds for
# fuzz_request_speech): OpenAI's fields, Chatterbox's sampling extensions, wrong types, edge
# values. Usage: scripts/fuzz_seed_request_speech.sh CORPUS_DIR
set -euo pipefail
dir=${1:?usage: $0 CORPUS_DIR}
mkdir -p "$dir"
i=0
seed() { i=$((i + 1)); printf '%s' "$1" >"$dir/seed_$i"; }
seed '{"model":"tts-1","input":"Hello there.","voice":"alloy"}'
seed '{"model":"chatterbox-multilingual","input":"Bonjour","language":"fr","response_format":"wav","speed":1.5}'
seed '{"input":"Hi","voice":{"id":"default"},"stream_format":"sse","response_format":"pcm","instructions":"calm"}'
seed '{"input":"x","seed":18446744073709551615,"temperature":0.8,"top_p":0.95,"min_p":0.05,"top_k":1000,"repetition_penalty":1.2,"exaggeration":0.5,"cfg_weight":0.5}'
seed '{"input":"x","temperature":1e-50,"top_k":-1,"speed":1e309}'
seed '{"input":"   ","voice":"nobody","response_format":"aac","model":"chatterbox-nano"}'
seed '{"input":"\u00e9\ud83d\ude00","language":null,"speed":"fast","seed":-1,"top_k":1.5}'
seed '[{"input":"nested"},[[[[[[1]]]]]]]'
seed '{"input":"a","model":"chatterbox-turbo","language":"en","response_format":"flac","stream_format":"audio"}'
