"""Live: a PD-P torch instance with a 1 MiB DRAM pool and a disk tier below it (issue 28).

A prompt is computed, pushed out of DRAM by others onto the instance's disk (its units become
files), and served again from there: its KV comes back from disk (a promotion removes the
units' files), with the greedy text it had when computed. A cold restart of the deployment on
the same directory starts with the disk tier empty (docs/kvcache.md, "Tiers"): the prompt is
computed afresh, to the same text. The router's metrics show the bytes each way; on a disk
that refuses every write (a full tmpfs) the demotions fail, every request is still answered,
and the metrics count the failures.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families
from serve_helpers import running

from prfaas.serve.config.deployment import Deployment, DiskTierSpec, RouterSpec, default_deployment

pytestmark = pytest.mark.e2e

MODEL = "tiny-qwen3-next"
PROMPT = "The disk tier keeps this prompt for later, said the engine."  # PD-P: under t
OTHERS = [f"Question {i}: add {i} and {2 * i}, then double the sum twice." for i in range(80)]


def deployment(directory: Path) -> Deployment:
    base = default_deployment()
    tier = DiskTierSpec(directory=str(directory), capacity_mib=64)
    instances = tuple(
        spec.model_copy(update={"capacity_mib": 1, "disk_tier": tier})
        if spec.name == "pdp-0"
        else spec
        for spec in base.instances
    )
    return base.model_copy(update={"router": RouterSpec(port=0), "instances": instances})


@contextlib.contextmanager
def served(plan: Deployment) -> Iterator[tuple[openai.OpenAI, str]]:
    with running(plan) as launcher:
        client = openai.OpenAI(
            base_url=launcher.url + "/v1", api_key="none", timeout=120, max_retries=0
        )
        yield client, launcher.url


def disk_tier_metrics(url: str) -> dict[str, float]:
    """pdp-0's disk-tier series on the router's /metrics, once its polls have seen every
    request's pool work (the router polls each instance's /state, so it may lag a poll)."""
    seen: dict[str, float] = {}
    for _ in range(100):  # bounded: the router polls every instance many times a second
        text = httpx.get(url + "/metrics", timeout=10).text
        seen = {
            sample.labels.get("direction", sample.name): sample.value
            for family in text_string_to_metric_families(text)
            if family.name
            in ("prfaas:instance_disk_tier_bytes", "prfaas:instance_failed_demotions")
            for sample in family.samples
            if sample.labels["instance"] == "pdp-0"
        }
        if seen.get("demoted") and (seen.get("promoted") or seen.get(FAILED)):
            return seen
        time.sleep(0.1)
    return seen


FAILED = "prfaas:instance_failed_demotions"


def complete(client: openai.OpenAI, prompt: str) -> tuple[str, int, str]:
    out = client.completions.create(model=MODEL, prompt=prompt, max_tokens=8, temperature=0)
    assert out.usage is not None and out.usage.prompt_tokens_details is not None
    path = (out.model_extra or {})["prfaas"]["path"]
    return out.choices[0].text, out.usage.prompt_tokens_details.cached_tokens or 0, path


def test_a_prefix_evicted_from_dram_is_served_from_disk_and_a_cold_restart_clears_it(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "disk"
    plan = deployment(directory)
    with served(plan) as (client, url):
        text, cached, path = complete(client, PROMPT)
        assert (cached, path) == (0, "pd-p")
        for other in OTHERS:  # push the prompt out of the 1 MiB of DRAM, onto disk
            complete(client, other)
        before = set(directory.glob("*.unit"))
        again, cached, _ = complete(client, PROMPT)
        assert cached > 0 and again == text
        assert before - set(directory.glob("*.unit"))  # its units were promoted off the disk
        shown = disk_tier_metrics(url)
        assert shown["demoted"] > 0 and shown["promoted"] > 0 and shown[FAILED] == 0
    with served(plan) as (client, _):
        assert not any(directory.glob("*.unit"))
        cold, cached, _ = complete(client, PROMPT)
        assert (cold, cached) == (text, 0)


def test_a_disk_that_refuses_every_write_loses_prefixes_not_requests(full_disk: Path) -> None:
    with served(deployment(full_disk)) as (client, url):
        text, _, _ = complete(client, PROMPT)
        for other in OTHERS:  # every unit pushed out of DRAM fails to reach the full disk
            complete(client, other)
        again, _, _ = complete(client, PROMPT)  # its KV was lost: computed afresh
        assert again == text
        shown = disk_tier_metrics(url)
        assert shown["demoted"] > 0 and shown[FAILED] > 0
        assert not any(full_disk.glob("*.tmp"))
