"""The shipping plan crosses to the vLLM connector intact: whatever the shell resolves, the
JSON it writes into `kv_connector_extra_config` reads back as the same `ShippingPlan`, so the
connector builds exactly the shell's endpoints (one KV shipping path)."""

from __future__ import annotations

import dataclasses
import json

from hypothesis import given
from hypothesis import strategies as st

from prfaas.integrations.vllm.settings import ConnectorSettings
from prfaas.transfer import TlsConfig
from prfaas.transfer.shipping import Pacing, ReceiverNamespace, SenderNamespace, ShippingPlan

names = st.text("abcdefghijklmnopqrstuvwxyz0123456789-_./", min_size=1, max_size=20)
ports = st.integers(0, 65535)
pacings = st.builds(
    Pacing,
    st.none() | st.floats(1.0, 1e12, allow_nan=False),
    st.floats(0.0, 10.0, allow_nan=False),
)
plans = st.builds(
    ShippingPlan,
    listen_host=names,
    listen_port=ports,
    payload_checks=st.booleans(),
    sink_bytes=st.integers(2**20, 2**34),
    tls=st.none() | st.builds(TlsConfig, names, names, names, names),
    send=pacings,
    move=st.none() | pacings,
    sender_netns=st.none()
    | st.builds(SenderNamespace, names, names, st.lists(st.tuples(names, ports)).map(tuple)),
    receiver_netns=st.none() | st.builds(ReceiverNamespace, names, names),
)


@given(plans)
def test_a_plan_reads_back_unchanged_from_the_connectors_json(plan: ShippingPlan) -> None:
    extra = json.loads(json.dumps({"shipping": dataclasses.asdict(plan)}))
    assert ConnectorSettings.model_validate(extra).shipping == plan
