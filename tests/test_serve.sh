#!/usr/bin/env bash
# megatron-c serve on the tiny Llama 3.1 that transformers wrote (tests/fixtures/hf/llama31,
# straight from the Hugging Face directory with --load-hf): Megatron's PUT /api and OpenAI's
# POST /v1/completions answer what `megatron-c generate` prints for the same prompts (greedy,
# and seeded sampling with the same seed), also for 8 requests at once; stop strings;
# malformed, oversized, ill-typed and unknown input is a 400 (413 for a body over the cap)
# with a JSON error, after which the server still answers; unknown paths 404, wrong methods
# 405; SIGTERM ends it with exit 0 and leaves no temporary files. With TP 2 under mpirun
# (where there is one): the same greedy answers, and a clean exit on rank 0's SIGTERM.
set -u
BUILD=${1:-build}
BIN="$BUILD/megatron-c"
source "$(dirname "$0")/check.sh"
export OMP_NUM_THREADS=1
# NullTokenizer: prompts are space-separated ids; its end of document is id 299, which no
# continuation here holds
TOK=(--tokenizer-type NullTokenizer --vocab-size 300 --device cpu)
FIX=tests/fixtures/hf/llama31
command -v curl > /dev/null || { bad "curl is missing (scripts/install-deps.sh installs it)"; check_summary; exit 1; }

# ---- what generate says -----------------------------------------------------------------------
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); [print(json.dumps({"prompt": " ".join(map(str, p))})) for p in d["prompts"]]' \
    "$FIX/greedy.json" > "$TMP/prompts.jsonl"
P1=$(sed -n 1p "$TMP/prompts.jsonl" | python3 -c 'import json,sys; print(json.load(sys.stdin)["prompt"])')
P2=$(sed -n 2p "$TMP/prompts.jsonl" | python3 -c 'import json,sys; print(json.load(sys.stdin)["prompt"])')
"$BIN" convert --input "$FIX" --output "$TMP/ckpt" --to megatron-c > /dev/null 2>&1
SAMPLING=(--temperature 0.9 --top-k 50 --seed 11)
"$BIN" generate --load "$TMP/ckpt" --prompts-file "$TMP/prompts.jsonl" --max-new-tokens 16 "${TOK[@]}" 2> /dev/null |
    grep '^{' > "$TMP/greedy.want"
"$BIN" generate --load "$TMP/ckpt" --prompts-file "$TMP/prompts.jsonl" --max-new-tokens 16 "${TOK[@]}" "${SAMPLING[@]}" \
    2> /dev/null | grep '^{' > "$TMP/sampled.want"
[ "$(wc -l < "$TMP/greedy.want")" = 2 ] && [ "$(wc -l < "$TMP/sampled.want")" = 2 ]
check generate_references $? "$(cat "$TMP/greedy.want" "$TMP/sampled.want")"
# line N of a reference: its continuation's ids, space-separated
want() { sed -n "$2p" "$TMP/$1.want" | python3 -c 'import json,sys; print(" ".join(map(str, json.load(sys.stdin)["ids"])))'; }

# ---- the server ---------------------------------------------------------------------------------
mkdir -p "$TMP/tmpdir"
start_server() { # OUT_PREFIX [launcher...] -- serve's extra flags: sets PORT, SERVER_PID
    local out=$1
    shift
    "$@" > "$out.out" 2> "$out.err" &
    SERVER_PID=$!
    PORT=
    for _ in $(seq 300); do
        PORT=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$out.out" 2> /dev/null | sed 's/.*://')
        [ -n "$PORT" ] && return 0
        kill -0 $SERVER_PID 2> /dev/null || break
        sleep 0.1
    done
    return 1
}
# call METHOD PATH BODY: the status on stdout, the answer in $TMP/answer
call() { curl -s -o "$TMP/answer" -w '%{http_code}' -X "$1" "http://127.0.0.1:$PORT$2" -H 'Content-Type: application/json' \
    --data-binary "$3"; }
# pyq EXPR: EXPR over the answer (as a), printed
pyq() { python3 -c "import json,sys; a=json.load(open(sys.argv[1])); print($1)" "$TMP/answer" 2>&1; }

TMPDIR="$TMP/tmpdir" start_server "$TMP/serve" "$BIN" serve --load-hf "$FIX" --port 0 --max-positions 128 \
    --max-batch-size 4 "${TOK[@]}"
check server_starts $? "$(tail -3 "$TMP/serve.err")"
grep -q "^megatron-c serve: listening on http://127.0.0.1:$PORT " "$TMP/serve.out"
check prints_its_url $? "$(cat "$TMP/serve.out")"

# Megatron's API: text = prompt + continuation, tokens = their ids, segments = each token's text
code=$(call PUT /api "{\"prompts\": [\"$P1\", \"$P2\"], \"tokens_to_generate\": 16, \"temperature\": 0}")
got=$(pyq '"|".join(" ".join(map(str, t[8:])) for t in a["tokens"])')
[ "$code" = 200 ] && [ "$got" = "$(want greedy 1)|$(want greedy 2)" ]
check api_greedy_equals_generate $? "$code $got"
[ "$(pyq 'a["text"][0]')" = "$P1 $(want greedy 1)" ] && [ "$(pyq '" ".join(a["segments"][1])')" = "$P2 $(want greedy 2)" ]
check api_text_and_segments $? "$(head -c 400 "$TMP/answer")"
# greedy is also Megatron's top_k 1 at its default temperature 1
code=$(call PUT /api "{\"prompts\": [\"$P2\"], \"tokens_to_generate\": 16, \"top_k\": 1}")
[ "$code" = 200 ] && [ "$(pyq '" ".join(map(str, a["tokens"][0][8:]))')" = "$(want greedy 2)" ]
check api_top_k_1_is_greedy $? "$code $(head -c 300 "$TMP/answer")"

# OpenAI's completions: the continuation's text (after the prompt's: it begins with a space)
code=$(call POST /v1/completions "{\"model\": \"x\", \"prompt\": [\"$P1\", \"$P2\"], \"max_tokens\": 16, \"temperature\": 0}")
got=$(pyq '"|".join(c["text"] for c in a["choices"])')
[ "$code" = 200 ] && [ "$got" = " $(want greedy 1)| $(want greedy 2)" ]
check completions_greedy_equals_generate $? "$code $got"
got=$(pyq '[a["object"], a["model"], a["id"][:5], type(a["created"]).__name__, [(c["index"], c["logprobs"], c["finish_reason"]) for c in a["choices"]], a["usage"]]')
[ "$got" = "['text_completion', 'llama31', 'cmpl-', 'int', [(0, None, 'length'), (1, None, 'length')], {'prompt_tokens': 16, 'completion_tokens': 32, 'total_tokens': 48}]" ]
check completions_fields $? "$got"
code=$(call POST /v1/completions "{\"prompt\": [139, 187, 156, 224, 188, 17, 163, 100], \"max_tokens\": 16, \"temperature\": 0, \"echo\": true}")
[ "$code" = 200 ] && [ "$(pyq 'a["choices"][0]["text"]')" = "$P1 $(want greedy 1)" ]
check completions_ids_prompt_and_echo $? "$code $(head -c 300 "$TMP/answer")"

# seeded sampling: generate --seed's draws
code=$(call PUT /api "{\"prompts\": [\"$P1\", \"$P2\"], \"tokens_to_generate\": 16, \"temperature\": 0.9, \"top_k\": 50, \"random_seed\": 11}")
got=$(pyq '"|".join(" ".join(map(str, t[8:])) for t in a["tokens"])')
[ "$code" = 200 ] && [ "$got" = "$(want sampled 1)|$(want sampled 2)" ]
check api_sampling_equals_generate_seed $? "$code $got vs $(want sampled 1)|$(want sampled 2)"
code=$(call POST /v1/completions "{\"prompt\": \"$P2\", \"max_tokens\": 16, \"temperature\": 0.9, \"top_k\": 50, \"seed\": 11}")
[ "$code" = 200 ] && [ "$(pyq 'a["choices"][0]["text"]')" = " $(want sampled 2)" ]
check completions_sampling_equals_generate_seed $? "$code $(head -c 300 "$TMP/answer")"

# a stop string: the text ends before it, finish_reason stop, no tokens after it made
stop=" $(want greedy 1 | cut -d' ' -f5)"
code=$(call POST /v1/completions "{\"prompt\": \"$P1\", \"max_tokens\": 16, \"temperature\": 0, \"stop\": [\"$stop\"]}")
got=$(pyq '(a["choices"][0]["text"], a["choices"][0]["finish_reason"], a["usage"]["completion_tokens"])')
[ "$code" = 200 ] && [ "$got" = "(' $(want greedy 1 | cut -d' ' -f1-4)', 'stop', 5)" ]
check completions_stop_string $? "$code $got (stop '$stop')"

# 8 requests at once (both APIs, both prompts): each answer is generate's
for i in 1 2 3 4 5 6 7 8; do
    p=$P1 && [ $((i % 2)) = 0 ] && p=$P2
    if [ $((i % 4)) -lt 2 ]; then
        curl -s -X PUT "http://127.0.0.1:$PORT/api" --data-binary "{\"prompts\": [\"$p\"], \"tokens_to_generate\": 16, \"temperature\": 0}" \
            > "$TMP/concurrent.$i" &
    else
        curl -s -X POST "http://127.0.0.1:$PORT/v1/completions" --data-binary "{\"prompt\": \"$p\", \"max_tokens\": 16, \"temperature\": 0}" \
            > "$TMP/concurrent.$i" &
    fi
done
wait $(jobs -p | grep -v "^$SERVER_PID$")
ok_all=0
for i in 1 2 3 4 5 6 7 8; do
    n=$((2 - i % 2))
    got=$(python3 -c 'import json,sys; a=json.load(open(sys.argv[1]))
print(" ".join(map(str, a["tokens"][0][8:])) if "tokens" in a else a["choices"][0]["text"].strip())' "$TMP/concurrent.$i" 2>&1)
    [ "$got" = "$(want greedy $n)" ] || { ok_all=1; echo "  request $i: $got"; }
done
check concurrent_requests_equal_generate $ok_all "see above"

# ---- refusals: status, a JSON {"error": ...} that says why, and the server goes on --------------------
refused() { # NAME STATUS METHOD PATH BODY [WORD in the error]
    local code
    code=$(call "$3" "$4" "$5")
    local msg
    msg=$(pyq 'a["error"]')
    [ "$code" = "$2" ] && [ -n "$msg" ] && [[ $msg != Traceback* ]] && [[ $msg == *"${6:-}"* ]]
    check "refuses_$1" $? "status $code: $(head -c 300 "$TMP/answer")"
}
refused malformed_json 400 PUT /api '{"prompts": ["1 2"' "malformed JSON"
refused trailing_garbage 400 PUT /api '{"prompts": ["1 2"]} x' "malformed JSON"
refused empty_body 400 POST /v1/completions '' "empty"
refused not_an_object 400 PUT /api '["1 2"]' "JSON object"
refused unknown_field 400 PUT /api '{"prompts": ["1 2"], "tokens_to_generat": 4}' "tokens_to_generat"
refused unknown_field_completions 400 POST /v1/completions '{"prompt": "1 2", "best_of": 2}' "best_of"
refused missing_prompts 400 PUT /api '{"tokens_to_generate": 4}' "prompts"
refused prompts_not_a_list 400 PUT /api '{"prompts": "1 2"}' "prompts"
refused prompt_not_a_string 400 PUT /api '{"prompts": ["1 2", 3]}' "prompts[1]"
refused tokens_as_string 400 PUT /api '{"prompts": ["1 2"], "tokens_to_generate": "4"}' "tokens_to_generate"
refused tokens_fractional 400 PUT /api '{"prompts": ["1 2"], "tokens_to_generate": 2.5}' "tokens_to_generate"
refused tokens_zero 400 PUT /api '{"prompts": ["1 2"], "tokens_to_generate": 0}' "tokens_to_generate"
refused negative_temperature 400 PUT /api '{"prompts": ["1 2"], "temperature": -1}' "temperature"
refused top_p_above_1 400 POST /v1/completions '{"prompt": "1 2", "top_p": 1.5}' "top_p"
refused top_p_zero 400 POST /v1/completions '{"prompt": "1 2", "top_p": 0}' "top_p"
refused bool_as_number 400 PUT /api '{"prompts": ["1 2"], "add_BOS": 1}' "add_BOS"
refused logprobs 400 PUT /api '{"prompts": ["1 2"], "logprobs": true}' "not supported"
refused beam_search 400 PUT /api '{"prompts": ["1 2"], "beam_width": 2}' "beam"
refused n_2 400 POST /v1/completions '{"prompt": "1 2", "n": 2}' "n:"
refused stream 400 POST /v1/completions '{"prompt": "1 2", "stream": true}' "stream"
refused empty_stop 400 POST /v1/completions '{"prompt": "1 2", "stop": [""]}' "stop"
refused empty_prompt 400 PUT /api '{"prompts": [""]}' "add_BOS"
refused not_ids 400 PUT /api '{"prompts": ["1 x 2"]}' "prompt 1"
refused id_outside_vocab 400 POST /v1/completions '{"prompt": [1, 300]}' "vocabulary"
long=$(seq -s ' ' 1 120)
refused prompt_over_positions 400 PUT /api "{\"prompts\": [\"$long\"], \"tokens_to_generate\": 16}" "128 positions"
refused tokens_over_positions 400 POST /v1/completions '{"prompt": "1 2", "max_tokens": 500}' "max_tokens"
many=$(python3 -c 'import json; print(json.dumps({"prompts": ["1 2"] * 129}))')
refused too_many_prompts 400 PUT /api "$many" "128"
head -c $((9 << 20)) /dev/zero | tr '\0' ' ' > "$TMP/big"
code=$(curl -s -o "$TMP/answer" -w '%{http_code}' -X PUT "http://127.0.0.1:$PORT/api" --data-binary "@$TMP/big")
[ "$code" = 413 ] && [[ $(pyq 'a["error"]') == *"larger than"* ]]
check refuses_oversized_body $? "status $code: $(head -c 200 "$TMP/answer")"
refused unknown_path 404 GET /v1/models '' "no such path"
refused wrong_method 405 GET /api '' "PUT"
refused wrong_method_completions 405 PUT /v1/completions '{"prompt": "1 2"}' "POST"
allow=$(curl -s -i -X GET "http://127.0.0.1:$PORT/api" | tr -d '\r' | grep -i '^Allow:')
[ "$allow" = "Allow: PUT" ]
check wrong_method_says_allow $? "'$allow'"

code=$(call PUT /api "{\"prompts\": [\"$P1\"], \"tokens_to_generate\": 16, \"temperature\": 0}")
[ "$code" = 200 ] && [ "$(pyq '" ".join(map(str, a["tokens"][0][8:]))')" = "$(want greedy 1)" ]
check still_serves_after_refusals $? "$code $(head -c 300 "$TMP/answer")"

# ---- SIGTERM while a request of 128 prompts is generated: that request is answered, exit 0, the
# port closed, --load-hf's temporary checkpoint gone ---------------------------------------------------
python3 -c 'import json,sys; print(json.dumps({"prompts": [sys.argv[1]] * 128, "tokens_to_generate": 110, "temperature": 0}))' \
    "$P1" > "$TMP/inflight.json"
curl -s -o "$TMP/inflight" -X PUT "http://127.0.0.1:$PORT/api" --data-binary "@$TMP/inflight.json" &
CURL_PID=$!
sleep 0.3
kill -TERM $SERVER_PID
wait $SERVER_PID
rc=$?
wait $CURL_PID
[ $rc = 0 ] && grep -q "megatron-c serve: stopped" "$TMP/serve.err"
check sigterm_exits_0 $? "exit $rc: $(tail -3 "$TMP/serve.err")"
got=$(python3 -c 'import json,sys; a=json.load(open(sys.argv[1])); print(len(a["tokens"]), set(" ".join(map(str, t[8:24])) for t in a["tokens"]))' \
    "$TMP/inflight" 2>&1)
[ "$got" = "128 {'$(want greedy 1)'}" ]
check sigterm_answers_the_request_in_flight $? "$got"
if ! grep -A100 "SIGTERM" "$TMP/serve.err" | grep -q "PUT /api 200: 128 prompt"; then
    echo "note: the 128 prompts were done before the signal came (the in-flight case was not met)"
fi
curl -s -o /dev/null "http://127.0.0.1:$PORT/api" -X PUT --data-binary '{}'
[ $? = 7 ]
check port_closed_after_exit $? "curl still connects"
[ -z "$(ls -A "$TMP/tmpdir")" ]
check leaves_no_temporary_files $? "left: $(ls "$TMP/tmpdir")"

# ---- bad flags: one line, exit 2 ------------------------------------------------------------------
for args in "--port 70000 --load $TMP/ckpt" "--port 0" "--load $TMP/ckpt --max-positions 99999" \
            "--load $TMP/ckpt --max-batch-size 0" "--load $TMP/nowhere --port 0"; do
    # shellcheck disable=SC2086
    "$BIN" serve $args "${TOK[@]}" > /dev/null 2> "$TMP/err"
    code=$?
    [ $code = 2 ] && [ "$(wc -l < "$TMP/err")" = 1 ]
    check "bad_flags: $args" $? "exit $code: $(head -3 "$TMP/err")"
done
# the port is taken: one line that says so, exit 2
start_server "$TMP/first" "$BIN" serve --load "$TMP/ckpt" --port 0 "${TOK[@]}"
"$BIN" serve --load "$TMP/ckpt" --port "$PORT" "${TOK[@]}" > /dev/null 2> "$TMP/err"
code=$?
[ $code = 2 ] && grep -q "cannot listen on 127.0.0.1:$PORT" "$TMP/err"
check port_taken $? "exit $code: $(tail -2 "$TMP/err")"
kill -TERM $SERVER_PID
wait $SERVER_PID

# ---- tensor parallelism: rank 0 serves, every rank generates ---------------------------------------
if command -v mpirun > /dev/null; then
    # a collective timeout of 2 s: the idle heartbeat (every 0.5 s) must keep rank 1 waiting
    MC_COMM_TIMEOUT_SECONDS=2 start_server "$TMP/tp" mpirun --allow-run-as-root --oversubscribe -np 2 \
        -x OMP_NUM_THREADS -x MC_COMM_TIMEOUT_SECONDS "$BIN" serve \
        --load "$TMP/ckpt" --port 0 --max-positions 128 "${TOK[@]}" --tensor-model-parallel-size 2 \
        --make-vocab-size-divisible-by 64
    check tp2_server_starts $? "$(tail -3 "$TMP/tp.err")"
    sleep 3
    code=$(call POST /v1/completions "{\"prompt\": [\"$P1\", \"$P2\"], \"max_tokens\": 16, \"temperature\": 0}")
    got=$(pyq '"|".join(c["text"] for c in a["choices"])')
    [ "$code" = 200 ] && [ "$got" = " $(want greedy 1)| $(want greedy 2)" ]
    check tp2_greedy_equals_generate $? "$code $got"
    # mpirun's own SIGTERM ends the job at once (Open MPI's way): a clean stop is rank 0's
    for p in $(pgrep -P $SERVER_PID); do
        tr '\0' '\n' < /proc/$p/environ | grep -qx OMPI_COMM_WORLD_RANK=0 && kill -TERM "$p"
    done
    wait $SERVER_PID
    rc=$?
    [ $rc = 0 ] && grep -q "megatron-c serve: stopped" "$TMP/tp.err"
    check tp2_sigterm_on_rank_0_exits_0 $? "exit $rc: $(tail -3 "$TMP/tp.err")"
else
    echo "skip tp2: no mpirun"
fi
check_summary
