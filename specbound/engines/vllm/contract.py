"""vLLM's host contracts for its speculative-decoding Triton kernels, read from the launch
sites of vLLM 0.33.0 (one data-driven table; every row cites ``file:function``).

Runtime quantities are symbolic Z3 integers named as vLLM names them: ``batch`` (requests in
the verify step, the grid), ``max_spec_len`` (``SpecDecodeMetadata.max_spec_len``),
``num_tokens`` (draft tokens of the batch), ``vocab_size`` (the target model's vocabulary:
``target_probs.shape[1]``) and ``num_spec`` (``num_speculative_tokens``).  Constexpr block
sizes are the values vLLM's dispatchers pass.

Facts are of two kinds: ``checked`` (vLLM asserts or constructs them; the citation says
where) and ``relied`` (the kernel needs them and nothing in vLLM checks them: a finding,
with why it holds in practice or does not).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

import z3

REJ = "v1/sample/rejection_sampler.py"
UT = "v1/spec_decode/utils.py"
PROP = "v1/spec_decode/llm_base_proposer.py"
META = "v1/spec_decode/metadata.py"
INT32_MAX = 2 ** 31


@dataclass(frozen=True)
class Buf:
    arg: str            # the kernel's parameter
    shape: str          # as the launch site allocates it
    numel: str          # element count over the runtime quantities (a Python expression)
    dtype: str
    cite: str
    written: bool = False
    content: str = ""   # a content condition of CONTENTS (per cell)


@dataclass(frozen=True)
class Fact:
    name: str
    formula: str        # over the runtime quantities (And/Or/Implies available)
    kind: str           # "checked" | "relied"
    cite: str           # where vLLM checks or constructs it; for "relied": why it holds (or not)


@dataclass(frozen=True)
class Kernel:
    name: str
    file: str
    launch: str                      # file:function of the dispatcher that picks grid and constexprs
    grid: tuple                      # axis sizes over the runtime quantities
    scalars: tuple                   # (arg, quantity) runtime int32 scalars
    buffers: tuple
    specializations: tuple           # (label, constexprs, args passed as None)
    facts: tuple = ()
    abstract: tuple = ()             # loop-carried flags the model abstracts (flow.havoc)
    properties: tuple = ("IN-BOUNDS", "NO-WRAP", "RACE-FREE")
    quantities: tuple = ("batch", "max_spec_len", "num_tokens")
    region: str = "row"              # what one program owns (prove.py): row | segment | token | cell
    stored_ranges: tuple = ()        # (tensor, lo, hi, consumer): INDEX-IN-RANGE: lo <= stored value < hi


# Per-cell content conditions: ``v`` the cell's value, ``i`` its index, ``f`` the tensor's
# content function.
CONTENTS = {
    "cu": ("And(0 <= v - If(i == 0, 0, f(i - 1)), v - If(i == 0, 0, f(i - 1)) <= max_spec_len, 0 <= v, v <= num_tokens)",
           "checked", f"{META}:SpecDecodeMetadata.make_dummy / gpu_model_runner: np.cumsum(num_draft_tokens, "
           "dtype=np.int32); max_spec_len = max(num_draft_tokens) (SpecDecodeMetadata.__post_init__)"),
    "token": ("And(0 <= v, v < vocab_size)", "checked",
              f"{REJ}:rejection_sample: target_argmax = target_logits.argmax(dim=-1); bonus ids are sampled "
              "from [batch, vocab_size] logits"),
    "draft_id": ("And(-1 <= v, v < vocab_size)", "checked",
                 "config/speculative.py:SpeculativeConfig.verify_equal_vocab_size_if_draft_model raises on a draft "
                 "model of another vocabulary size (heterogeneous vocabularies go through a vocab mapping); EAGLE/MTP "
                 "heads and n-gram drafts propose the target's ids; -1 pads are rejected in the kernel (draft ids "
                 "index the target's [num_tokens, vocab_size] rows)"),
    "valid_count": ("And(0 <= v, v <= max_spec_len + 1, "
                    "v <= cu_num_draft_tokens(i) - If(i == 0, 0, cu_num_draft_tokens(i - 1)) + 1)", "checked",
                    f"{UT}:eagle_prepare_next_token_padded_kernel: tl.sum of a mask over num_spec_tokens + 1 lanes of "
                    "the rejection sampler's row, which holds at most num_draft_tokens + 1 ids before its -1 "
                    "placeholders (0 for a discarded request: a request with draft tokens may count 0)"),
    "qsl": (f"And(0 <= v, v < {INT32_MAX} - 256, v <= total_in, "
            "Implies(i >= 1, v >= cu_num_draft_tokens(i - 1) + i))", "relied",
            "query_start_loc is a cumsum of query lengths (<= max_num_batched_tokens), the last total_in (the verify "
            "step's tokens); each request schedules its draft tokens and at least one more (so query_start_loc[i] >= "
            "cu_num_draft_tokens[i - 1] + i); the int32 index arithmetic needs it below 2^31 - max_spec_len - 1; "
            "never checked, unreachable"),
    "position": ("And(0 <= v, v <= max_model_len)", "relied",
                 "positions of the previous step are < max_model_len or clamped to 0 by this kernel; not checked"),
    "block_id": ("And(0 <= v, v < num_kv_blocks)", "relied", "block ids name KV-cache blocks; not checked"),
    "position_any": ("And(0 <= v, v < 2 ** 62)", "checked", "token positions are non-negative and far below 2^62"),
    "query_start": ("And(0 <= v, If(i == 0, v == 0, And(1 <= v - f(i - 1), v - f(i - 1) <= max_query_len)), v <= total_in, "
                    "Implies(i < batch, v < total_in), Implies(i == batch, v == total_in))", "checked",
                    f"{PROP}:set_inputs_first_pass: cad.query_start_loc (cumsum of query lengths >= 1, <= "
                    "max_query_len; last = total_num_input_tokens)"),
    "query_end": ("And(0 <= v, v < total_in, query_start_loc(i) <= v, v <= query_start_loc(i + 1) - 1)", "checked",
                  f"{PROP}:set_inputs_first_pass: query_start_loc[1:] - 1 - num_rejected_tokens "
                  "(0 <= num_rejected < query length)"),
    "seq_len": ("And(0 <= v, v <= max_model_len)", "checked",
                "seq_lens never exceed max_model_len (the scheduler's limit; this kernel clamps its update)"),
}

COMMON = (
    Fact("batch_ge_1", "batch >= 1", "checked", f"{REJ}:_rejection_greedy_sample: grid (output_token_ids.shape[0],)"),
    Fact("max_spec_len_range", "And(0 <= max_spec_len, max_spec_len <= 128)", "checked",
         f"{REJ}:RejectionSampler.forward: assert metadata.max_spec_len <= MAX_SPEC_LEN (128)"),
    Fact("num_tokens_int32", f"And(0 <= num_tokens, num_tokens < {INT32_MAX})", "checked",
         f"{META}: cu_num_draft_tokens is an np.int32 cumsum"),
    Fact("output_rows_int32", f"batch * (max_spec_len + 1) < {INT32_MAX}", "relied",
         "req_idx * (max_spec_len + 1) is int32; never checked, unreachable: needs > 16.6M requests in one step"),
)
VOCAB = (Fact("vocab_int32", f"And(1 <= vocab_size, vocab_size < {INT32_MAX})", "checked",
              f"{REJ}:_rejection_random_sample: vocab_size=target_probs.shape[1] (an int32 kernel argument)"),)
VOCAB_LOOP = (Fact("vocab_loop_int32", f"vocab_size <= {INT32_MAX} - 8192", "relied",
                   "the vocabulary loop's next index v + BLOCK_SIZE (8192) is int32; never checked, no real "
                   "vocabulary comes near 2^31"),)
RATES = (Fact("rates_cover_drafts", "max_spec_len <= num_spec", "relied",
              "synthetic_conditional_rates has num_speculative_tokens entries, read at pos < max_spec_len; "
              "no draft step proposes more than num_speculative_tokens, not checked in rejection_sample"),)

CU = Buf("cu_num_draft_tokens_ptr", "[batch]", "batch", "int32", f"{REJ}:rejection_sample (# [batch_size])",
         content="cu")
OUT = Buf("output_token_ids_ptr", "[batch, max_spec_len + 1]", "batch * (max_spec_len + 1)", "int32",
          f"{REJ}:rejection_sample: torch.full((batch_size, max_spec_len + 1), PLACEHOLDER_TOKEN_ID, int32)",
          written=True)
DRAFT = Buf("draft_token_ids_ptr", "[num_tokens]", "num_tokens", "int32", f"{REJ}:rejection_sample: "
            "assert draft_token_ids.ndim == 1; num_tokens = draft_token_ids.shape[0]")
UNIFORM = Buf("uniform_probs_ptr", "[num_tokens]", "num_tokens", "float64",
              f"{REJ}:generate_uniform_probs: torch.rand((num_tokens,), float64)")
RATES_BUF = Buf("synthetic_conditional_rates_ptr", "[num_speculative_tokens]", "num_spec", "float32",
                f"{REJ}:rejection_sample (synthetic_conditional_rates)")
BONUS = Buf("bonus_token_ids_ptr", "[batch, 1]", "batch", "int64", f"{REJ}:RejectionSampler.forward: "
            "bonus_sampler_output.sampled_token_ids", content="token")
GREEDY = Buf("is_greedy_ptr", "[batch]", "batch", "int1", f"{REJ}:rejection_sample: is_greedy = "
             "sampling_metadata.temperature == GREEDY_TEMPERATURE")
PROBS = "[num_tokens, vocab_size]"

# --- the EAGLE input kernels (v1/spec_decode/utils.py, launched from llm_base_proposer.py) ------------

STEP_SPECS = tuple((f"block_size={b},max_model_len={m}", {"block_size": b, "max_model_len": m,
                    "n_blocks_per_req": -(-m // b), "PAD_ID": -1}, ())
                   for b, m in ((16, 4096), (1, 2048), (256, 131072)))
EAGLE = (
    Kernel("eagle_prepare_inputs_padded_kernel", UT, f"{PROP}:SpecDecodeBaseProposer.prepare_inputs_padded "
           f"({UT}:_eagle_prepare_inputs_padded)", ("batch",), (("num_reqs", "batch"),),
           (Buf("cu_num_draft_tokens_ptr", "[num_reqs]", "batch", "int32",
                f"{PROP}:prepare_inputs_padded: spec_decode_metadata.cu_num_draft_tokens", content="cu"),
            Buf("valid_sampled_tokens_count_ptr", "[num_reqs]", "batch", "int32",
                f"{PROP}:prepare_next_token_ids_padded (the next-token kernel's count)", content="valid_count"),
            Buf("query_start_loc_gpu_ptr", "[num_reqs + 1]", "batch + 1", "int32",
                f"{PROP}:prepare_inputs_padded: common_attn_metadata.query_start_loc", content="qsl"),
            Buf("token_indices_to_sample_ptr", "[num_reqs]", "batch", "int32",
                f"{PROP}:prepare_inputs_padded: torch.empty((num_reqs,), int32)", written=True),
            Buf("num_rejected_tokens_gpu_ptr", "[num_reqs]", "batch", "int32",
                f"{PROP}:prepare_inputs_padded: torch.empty((num_reqs,), int32)", written=True)),
           (("plain", {}, ()),), COMMON[:3], region="cell",
           properties=("IN-BOUNDS", "NO-WRAP", "RACE-FREE", "INDEX-IN-RANGE"),
           quantities=("batch", "max_spec_len", "num_tokens", "total_in"),
           stored_ranges=(("token_indices_to_sample_ptr", "0", "total_in",
                           f"{PROP}:propose: sample_hidden_states = last_hidden_states[token_indices_to_sample] "
                           "(rows [0, total_in): the verify step's tokens)"),)),
    Kernel("eagle_step_slot_mapping_metadata_kernel", UT, f"{PROP}:_update_positions_dependent_metadata "
           f"({UT}:eagle_step_update_slot_mapping_and_metadata)", ("input_batch",),
           (("block_table_stride", "bt_stride"), ("batch_size", "batch")),
           (Buf("positions_ptr", "[batch_size]", "batch", "int64", f"{UT}:eagle_step_update_slot_mapping_and_metadata: "
                "batch_size = positions_1d.shape[0]", content="position"),
            Buf("block_table_ptr", "[batch_size, n_blocks_per_req] (row stride block_table_stride)",
                "batch * bt_stride", "int32", f"{UT}:eagle_step_update_slot_mapping_and_metadata: "
                "block_table_tensor.stride(0), n_blocks_per_req = block_table_tensor.shape[1]", content="block_id"),
            Buf("seq_lens_ptr", "[batch_size]", "batch", "int32", f"{PROP}:_update_positions_dependent_metadata: "
                "common_attn_metadata.seq_lens (updated in place)", written=True, content="seq_len"),
            Buf("out_clamped_positions_ptr", "[batch_size]", "batch", "int64",
                f"{PROP}:_update_positions_dependent_metadata: self.positions[:batch_size]", written=True),
            Buf("out_slot_mapping_ptr", "[input_batch_size]", "input_batch", "int64",
                f"{PROP}:_update_positions_dependent_metadata: self._slot_mapping_buffer[:input_batch_size]",
                written=True)),
           STEP_SPECS,
           (Fact("batches", f"And(1 <= batch, batch <= input_batch, input_batch < {INT32_MAX})", "checked",
                 f"{UT}:eagle_step_update_slot_mapping_and_metadata: input_batch_size defaults to batch_size; "
                 "cudagraph padding only adds programs"),
            Fact("block_table_rows", "bt_stride >= n_blocks_per_req", "checked",
                 f"{UT}:eagle_step_update_slot_mapping_and_metadata: stride(0) of a [batch, n_blocks_per_req] view"),
            Fact("block_table_int32", f"batch * bt_stride < {INT32_MAX}", "relied",
                 "req_idx * block_table_stride is int32; never checked; needs max_num_seqs * blocks per request >= "
                 "2^31 (e.g. 1024 requests of 2M blocks)"),
            Fact("kv_slots_int32", f"And(1 <= num_kv_blocks, num_kv_blocks * block_size < {INT32_MAX})", "relied",
                 "block_id * block_size is int32; never checked; needs >= 2^31 KV token slots on one GPU")),
           quantities=("batch", "input_batch", "bt_stride", "num_kv_blocks"), region="cell"),
    Kernel("eagle_prepare_next_token_padded_kernel", UT, f"{PROP}:SpecDecodeBaseProposer.prepare_next_token_ids_padded "
           f"({UT}:_eagle_prepare_next_token_padded)", ("batch",),
           (("vocab_size", "vocab_size"), ("num_sampled_tokens_per_req", "width"), ("num_reqs", "batch"),
            ("stride_sampled_token_ids", "st_stride")),
           (Buf("sampled_token_ids_ptr", "[num_reqs, num_sampled_tokens_per_req] (row stride stride(0))",
                "batch * st_stride", "int32", f"{PROP}:prepare_next_token_ids_padded: batch_size, num_tokens = "
                "sampled_token_ids.shape"),
            Buf("discard_request_mask_ptr", "[num_reqs]", "batch", "int1",
                f"{PROP}:prepare_next_token_ids_padded: assert discard_request_mask.dtype == torch.bool"),
            Buf("backup_next_token_ids_ptr", "[num_reqs]", "batch", "int32",
                f"{PROP}:prepare_next_token_ids_padded: assert backup_tokens_gpu.dtype == torch.int32"),
            Buf("next_token_ids_ptr", "[num_reqs]", "batch", "int32",
                f"{PROP}:prepare_next_token_ids_padded: torch.empty(batch_size, int32)", written=True),
            Buf("valid_sampled_tokens_count_ptr", "[num_reqs]", "batch", "int32",
                f"{PROP}:prepare_next_token_ids_padded: next_token_ids.new_empty(batch_size)", written=True)),
           tuple((f"BLOCK_SIZE_TOKENS={b}", {"BLOCK_SIZE_TOKENS": b}, ()) for b in (2, 4, 8, 16)),
           (Fact("batch_ge_1", "batch >= 1", "checked", f"{UT}:_eagle_prepare_next_token_padded: grid (num_reqs,)"),
            Fact("block_covers_row", "And(1 <= width, width <= BLOCK_SIZE_TOKENS, 2 * width > BLOCK_SIZE_TOKENS)",
                 "checked", f"{PROP}:prepare_next_token_ids_padded: BLOCK_SIZE_TOKENS = next_power_of_2(num_tokens)"),
            Fact("row_stride", "st_stride >= width", "checked",
                 f"{PROP}:prepare_next_token_ids_padded: sampled_token_ids.stride(0) of a [batch, num_tokens] tensor"),
            Fact("sampled_int32", f"batch * st_stride < {INT32_MAX}", "relied",
                 "req_idx * stride_sampled_token_ids is int32; never checked, unreachable: batch * (k + 1) < 2^31"),
            VOCAB[0]),
           properties=("IN-BOUNDS", "NO-WRAP", "NO-TRUNCATION", "RACE-FREE"),
           quantities=("batch", "width", "st_stride", "vocab_size"), region="cell"),
    Kernel("copy_and_expand_eagle_inputs_kernel", UT, f"{PROP}:SpecDecodeBaseProposer.set_inputs_first_pass "
           f"({UT}:_copy_and_expand_eagle_inputs)", ("batch", "num_blocks"),
           (("padding_token_id", ""), ("parallel_drafting_token_id", ""), ("total_input_tokens", "total_in"),
            ("num_padding_slots_per_request", "P")),
           (Buf("target_token_ids_ptr", "[total_input_tokens]", "total_in", "int32",
                f"{PROP}:set_inputs_first_pass: total_num_input_tokens = target_token_ids.shape[0]"),
            Buf("target_positions_ptr", "[total_input_tokens]", "total_in", "int64",
                f"{PROP}:set_inputs_first_pass (target_positions)", content="position_any"),
            Buf("next_token_ids_ptr", "[batch]", "batch", "int32", f"{PROP}:set_inputs_first_pass (one per request)"),
            Buf("out_input_ids_ptr", "[max_num_tokens]", "max_num_tokens", "int32",
                f"{PROP}:__init__: self.input_ids = torch.zeros(self.max_num_tokens) (max_num_batched_tokens)",
                written=True),
            Buf("out_positions_ptr", "[max_num_tokens]", "max_num_tokens", "int64",
                f"{PROP}:__init__: self.positions = torch.zeros(self.max_positions); max_positions = max_num_tokens",
                written=True),
            Buf("out_is_rejected_token_mask_ptr", "[max_num_tokens]", "max_num_tokens", "int1",
                f"{PROP}:__init__: self.is_rejected_token_mask = torch.zeros((self.max_num_tokens,), bool)",
                written=True),
            Buf("out_is_masked_token_mask_ptr", "[max_num_tokens]", "max_num_tokens", "int1",
                f"{PROP}:__init__: self.is_masked_token_mask = torch.zeros((self.max_num_tokens,), bool)",
                written=True),
            Buf("out_new_token_indices_ptr", "[batch * extra_slots_per_request]", "batch * P", "int32",
                f"{PROP}:set_inputs_first_pass: torch.empty(batch_size * self.extra_slots_per_request)",
                written=True),
            Buf("out_hidden_state_mapping_ptr", "[total_input_tokens]", "total_in", "int32",
                f"{PROP}:set_inputs_first_pass: torch.empty(total_num_input_tokens)", written=True),
            Buf("query_start_loc_ptr", "[batch + 1]", "batch + 1", "int32",
                f"{PROP}:set_inputs_first_pass: cad.query_start_loc", content="query_start"),
            Buf("query_end_loc_ptr", "[batch]", "batch", "int32", f"{PROP}:set_inputs_first_pass: query_end_loc = "
                "cad.query_start_loc[1:] - 1 (- num_rejected_tokens_gpu)", content="query_end")),
           tuple((f"shift={sh},BLOCK_SIZE_TOKENS={b}", {"shift_input_ids": sh, "BLOCK_SIZE_TOKENS": b}, ())
                 for sh, b in ((False, 4), (True, 8), (False, 256), (True, 256))),
           (Fact("batch_ge_1", "batch >= 1", "checked", f"{UT}:_copy_and_expand_eagle_inputs: grid (batch_size, num_blocks)"),
            Fact("slots", "And(P >= 1, P <= 128, max_query_len >= 1)", "checked",
                 f"{PROP}:__init__: extra_slots_per_request = 1 or num_speculative_tokens"),
            Fact("blocks", "And(num_blocks >= 1, num_blocks * BLOCK_SIZE_TOKENS >= max_query_len + P - "
                 "(1 if shift_input_ids else 0), (num_blocks - 1) * BLOCK_SIZE_TOKENS < max_query_len + P, "
                 "max_query_len <= total_in)", "checked", f"{PROP}:set_inputs_first_pass: num_blocks = "
                 "cdiv(cad.max_query_len + net_num_new_slots_per_request, BLOCK_SIZE_TOKENS)"),
            Fact("input_budget", f"And(batch <= total_in, total_in + batch * (P - (1 if shift_input_ids else 0)) "
                 f"<= max_num_tokens, max_num_tokens < {INT32_MAX})", "checked",
                 "v1/core/sched/scheduler.py:Scheduler.schedule: the input budget (max_num_batched_tokens) counts "
                 "max_num_new_slots_for_drafting per request (config/speculative.py); "
                 "net_num_new_slots_per_request = P - shift"),
            Fact("token_budget", "max_num_tokens < 2 ** 30 - 512", "relied",
                 "every lane of a block computes qsl[r] + j (up to about twice the batch's tokens) in int32, masked "
                 "lanes included; never checked, unreachable: max_num_batched_tokens is far below 2^30")),
           properties=("IN-BOUNDS", "NO-WRAP", "NO-TRUNCATION", "RACE-FREE"),
           quantities=("batch", "num_blocks", "total_in", "P", "max_num_tokens", "max_query_len"),
           region="eagle_expand"),
)


KERNELS = (
    Kernel("rejection_greedy_sample_kernel", REJ, f"{REJ}:_rejection_greedy_sample", ("batch",),
           (("max_spec_len", "max_spec_len"),),
           (OUT, CU, DRAFT,
            Buf("target_argmax_ptr", "[num_tokens]", "num_tokens", "int64",
                f"{REJ}:rejection_sample: target_logits.argmax(dim=-1)", content="token"),
            BONUS, GREEDY, UNIFORM, RATES_BUF),
           (("is_greedy", {"SYNTHETIC_MODE": False}, ("uniform_probs_ptr", "synthetic_conditional_rates_ptr")),
            ("all_greedy", {"SYNTHETIC_MODE": False},
             ("is_greedy_ptr", "uniform_probs_ptr", "synthetic_conditional_rates_ptr")),
            ("synthetic", {"SYNTHETIC_MODE": True}, ())),
           COMMON + VOCAB + RATES, abstract=("rejected",),
           quantities=("batch", "max_spec_len", "num_tokens", "vocab_size", "num_spec")),
    Kernel("expand_kernel", REJ, f"{REJ}:_expand", ("batch",), (("replace_from", ""), ("replace_to", "")),
           (Buf("output_ptr", "[num_tokens]", "num_tokens", "{dtype}", f"{REJ}:expand_batch_to_tokens: "
                "x.new_empty(num_tokens)", written=True),
            Buf("input_ptr", "[batch]", "batch", "{dtype}", f"{REJ}:expand_batch_to_tokens: batch_size = x.shape[0]"),
            Buf("cu_num_tokens_ptr", "[batch]", "batch", "int32", f"{REJ}:expand_batch_to_tokens: "
                "assert cu_num_tokens.shape[0] == batch_size", content="cu")),
           tuple((dt, {"MAX_NUM_TOKENS": 128, "dtype": dt}, ()) for dt in ("float32", "int32", "int64")),
           COMMON, properties=("IN-BOUNDS", "NO-WRAP", "NO-TRUNCATION", "RACE-FREE", "FOOTPRINT"), region="segment"),
    Kernel("rejection_random_sample_kernel", REJ, f"{REJ}:_rejection_random_sample", ("batch",),
           (("max_spec_len", "max_spec_len"), ("vocab_size", "vocab_size")),
           (OUT, CU, Buf("draft_token_ids_ptr", "[num_tokens]", "num_tokens", "int32", DRAFT.cite, content="draft_id"),
            Buf("draft_probs_ptr", PROBS, "num_tokens * vocab_size", "float32", f"{REJ}:rejection_sample: "
                "assert draft_probs is None or draft_probs.is_contiguous()"),
            Buf("target_probs_ptr", PROBS, "num_tokens * vocab_size", "float32", f"{REJ}:rejection_sample: "
                "target_probs = target_logits.softmax(dim=-1, dtype=float32); assert target_logits.shape == "
                "(num_tokens, vocab_size)"),
            BONUS, Buf("recovered_token_ids_ptr", "[num_tokens]", "num_tokens", "int32",
                       f"{REJ}:sample_recovered_tokens: torch.empty_like(draft_token_ids)"),
            UNIFORM, GREEDY, RATES_BUF),
           (("draft_probs", {"NO_DRAFT_PROBS": False, "SYNTHETIC_MODE": False}, ("synthetic_conditional_rates_ptr",)),
            ("no_draft_probs", {"NO_DRAFT_PROBS": True, "SYNTHETIC_MODE": False},
             ("draft_probs_ptr", "synthetic_conditional_rates_ptr")),
            ("synthetic", {"NO_DRAFT_PROBS": True, "SYNTHETIC_MODE": True}, ("draft_probs_ptr",))),
           COMMON + VOCAB + RATES, abstract=("rejected",),
           quantities=("batch", "max_spec_len", "num_tokens", "vocab_size", "num_spec")),
    Kernel("sample_recovered_tokens_kernel", REJ, f"{REJ}:_sample_recovered_tokens", ("batch", "max_spec_len"),
           (("vocab_size", "vocab_size"),),
           (Buf("output_token_ids_ptr", "[num_tokens]", "num_tokens", "int32",
                f"{REJ}:sample_recovered_tokens: torch.empty_like(draft_token_ids)", written=True),
            CU, Buf("draft_token_ids_ptr", "[num_tokens]", "num_tokens", "int32", DRAFT.cite, content="draft_id"),
            Buf("draft_probs_ptr", PROBS, "num_tokens * vocab_size", "float32", f"{REJ}:rejection_sample"),
            Buf("target_probs_ptr", PROBS, "num_tokens * vocab_size", "float32", f"{REJ}:rejection_sample"),
            Buf("inv_q_ptr", "[batch, vocab_size]", "batch * vocab_size", "{q_dtype}",
                f"{REJ}:sample_recovered_tokens: q = torch.empty((batch_size, vocab_size)); inv_q = q.reciprocal()")),
           tuple((f"{'no_' if nd else ''}draft_probs{'_fp64' if fp else ''}",
                  {"BLOCK_SIZE": 8192, "NO_DRAFT_PROBS": nd, "USE_FP64_GUMBEL": fp, "q_dtype": "float64" if fp else "float32"},
                  ("draft_probs_ptr",) if nd else ()) for nd in (False, True) for fp in (False,)),
           COMMON + VOCAB + VOCAB_LOOP, abstract=("max_val", "recovered_id"),
           quantities=("batch", "max_spec_len", "num_tokens", "vocab_size"), region="token"),
) + EAGLE

BY_NAME = {k.name: k for k in KERNELS}


def quantities(names) -> dict:
    return {n: z3.Int(n) for n in names}


def term(expr: str, q: dict, **more):
    """A table formula as a Z3 term over the quantities ``q`` (and ``more``)."""
    ns = {"And": z3.And, "Or": z3.Or, "Implies": z3.Implies, "If": z3.If, "__builtins__": {}}
    return eval(expr, ns, {**q, **more})   # the table's own expressions, never user input


def facts(kernel: Kernel) -> tuple:
    """Every fact of the kernel's contract, the content conditions of its buffers included."""
    used = {b.content for b in kernel.buffers if b.content}
    return kernel.facts + tuple(Fact(f"content:{c}", CONTENTS[c][0], CONTENTS[c][1], CONTENTS[c][2])
                                for c in sorted(used))


def table_params(kernel: Kernel) -> set:
    """The kernel parameters the table names: buffers, scalars and the specializations'
    constexprs (not the format keys of the buffers' dtypes, such as ``{dtype}``)."""
    import string

    fmt = {f for b in kernel.buffers for _t, f, _s, _c in string.Formatter().parse(b.dtype) if f}
    known = {b.arg for b in kernel.buffers} | {a for a, _ in kernel.scalars}
    for _label, constexprs, _none in kernel.specializations:
        known |= {k for k in constexprs if k not in fmt}
    return known


def kernel_def(name: str, source: str) -> ast.FunctionDef | None:
    """The module-level ``def name`` of ``source`` (a kernel's @triton.jit function), or None."""
    return next((n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == name), None)


def source_params(kernel: Kernel, source: str) -> list:
    fn = kernel_def(kernel.name, source)
    if fn is None:
        raise ValueError(f"{kernel.file}: no kernel {kernel.name}")
    return [a.arg for a in fn.args.args]


def check_signature(kernel: Kernel, source: str) -> None:
    """The kernel's parameters in the source are exactly the table's; a changed signature
    (a vLLM release that added, dropped or renamed one) is an error naming the difference."""
    params, known = set(source_params(kernel, source)), table_params(kernel)
    if params != known:
        raise ValueError(f"{kernel.name}: parameters in the source {sorted(params - known)} not in the contract "
                         f"table, table entries {sorted(known - params)} not in the source")
