"""Other writers' lines, as they stand between an engine's lines in a real server log.

Each unit is what one writer prints at once (a Python warning is two lines: the warning and the
source line the ``warnings`` module prints after it). The shapes are the writers' own: lines
copied from the real vLLM's logs in ``fixtures/engine/`` (its stderr, captured by the real-engine
suite) and from the fixtures of SGLang 0.4.6 and vLLM 0.4-0.6, and lines of the same shapes from
the tools that print them (tqdm's ``format_meter``, huggingface_hub's download bars, NCCL's
``host:pid:tid [dev] NCCL INFO``, Gloo, torch's c10 logger, absl), and ``print()`` output of every
kind (text, a dict, a list, a number, an empty line). ``tests/pipeline/test_noise.py`` inserts
them after the lines of every fixture.
"""

from __future__ import annotations

NOISE: dict[str, tuple[str, ...]] = {
    # tqdm bars: weight shards (SGLang 0.4.6 and vLLM's fixtures, the real vLLM 0.32), CUDA graph capture
    "shards": ("Loading safetensors checkpoint shards:  50% Completed | 2/4 [00:03<00:03,  1.52s/it]",),
    "shards-start": ("Loading safetensors checkpoint shards:   0% Completed | 0/37 [00:00<?, ?it/s]",),
    "shards-multithread": ("Multi-thread loading shards: 100% Completed | 16/16 [00:10<00:00,  1.49it/s]",),
    "shards-vllm-prefix": (
        "(EngineCore_DP0 pid=1805889) Loading safetensors checkpoint shards:  25% Completed | 1/4 [00:02<00:07,  2.50s/it]",
    ),
    "capture-sglang": ("Capturing batches (bs=24 avail_mem=4.00 GB):  14%|█▍        | 3/22 [00:01<00:08,  2.30it/s]",),
    "capture-sglang-done": ("Capturing batches (avail_mem=13.90 GB): 100%|██████████| 23/23 [00:19<00:00,  1.19it/s]",),
    "capture-vllm": ("Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%|██████████| 67/67 [00:04<00:00, 15.21it/s]",),
    "capture-cr": ("Loading:   0%|          | 0/4 [00:00<?, ?it/s]\rLoading: 100%|██████████| 4/4 [00:01<00:00,  3.20it/s]",),
    # huggingface_hub: a file of known size, one without a total, the files of a snapshot
    "hub-shard": ("model-00001-of-00004.safetensors: 100%|██████████| 4.97G/4.97G [00:21<00:00, 231MB/s]",),
    "hub-config": ("config.json: 4.33kB [00:00, 24.6MB/s]",),
    "hub-fetch": ("Fetching 14 files: 100%|██████████| 14/14 [01:12<00:00,  5.18s/it]",),
    # the warnings module: the warning and the source line after it (the real vLLM 0.32's stderr)
    "warning-deprecation": (
        "/opt/vllm-cpu/lib/python3.11/site-packages/vllm/entrypoints/openai/api_server.py:24: DeprecationWarning: "
        "`vllm.entrypoints.openai.api_server` is deprecated and will likely beunsupported in a future version.",
        "  warnings.warn(",
    ),
    "warning-future": (
        "/opt/vllm-cpu/lib/python3.11/site-packages/vllm/triton_utils/dispatcher.py:138: FutureWarning: "
        "`torch.distributed.reduce_op` is deprecated, please use `torch.distributed.ReduceOp` instead",
        '  if hasattr(value, "__dict__"):',
    ),
    "warning-pynvml": (
        "/usr/local/lib/python3.12/dist-packages/torch/cuda/__init__.py:63: FutureWarning: The pynvml package is deprecated. "
        "Please install nvidia-ml-py instead.",
        "  import pynvml  # type: ignore[import]",
    ),
    "warning-leak": (
        "/usr/local/lib/python3.11/multiprocessing/resource_tracker.py:254: UserWarning: resource_tracker: There appear to be "
        "2 leaked shared_memory objects to clean up at shutdown",
        "  warnings.warn('resource_tracker: There appear to be %d '",
    ),
    # NCCL, Gloo, torch's c10 logger (its own time stamp: not the log's clock), absl
    "nccl-info": ("gpu-node-1:1234:1234 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>",),
    "nccl-version": ("NCCL version 2.21.5+cuda12.4",),
    "gloo": ("[Gloo] Rank 0 is connected to 1 peer ranks. Expected number of connected peer ranks is : 1",),
    "c10-numa": (
        "[W1202 00:27:22.014115057 utils.cpp:68] Warning: NUMA binding: Using MEMBIND policy for memory allocation on the "
        "NUMA nodes (0). Memory allocations will be strictly bound to these NUMA nodes.",
    ),
    "c10-rank": (
        "[rank0]:[W1104 10:12:44.361437153 ProcessGroupNCCL.cpp:1496] Warning: WARNING: destroy_process_group() was not "
        "called before program exit, which can leak resources.",
    ),
    "absl": ("WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",),
    # print(): a chat template's, a tokenizer's, a user's
    "print-text": ("Hello from the chat template, rendering 3 messages",),
    "print-tokenizer": (
        "Special tokens have been added in the vocabulary, make sure the associated word embeddings are fine-tuned or trained.",
    ),
    "print-dict": ("{'role': 'user', 'content': 'Summarise the log: max_running_requests=9, #tokens: 42, K size: 1 GB'}",),
    "print-list": ("['qwen3.6-35b-a3b', 'qwen3.6-35b-a3b-autoround']",),
    "print-number": ("42",),
    "print-empty": ("",),
}

__all__ = ["NOISE"]
