import json
import math

import numpy as np
import pytest
from pydantic import ValidationError

from vhd.mechanisms import registry
from vhd.schemas.hashing import canonical_json, content_id
from vhd.schemas.records import EnvironmentRecord, ModelRecord
from vhd.tasks.stages.sample import sample_models
from vhd.tasks.stages.solve import solve_models, unpack_policy


def test_canonical_json_is_order_free_and_refuses_nan():
    assert canonical_json({"b": 1, "a": [1.5, "é"]}) == '{"a":[1.5,"é"],"b":1}'
    with pytest.raises(ValueError):
        canonical_json({"x": math.nan})


def test_content_id_definition():
    import hashlib

    expected = hashlib.sha256(b'{"content":{"seed":7},"kind":"model","version":"f@1"}').hexdigest()
    assert content_id("model", "f@1", {"seed": 7}) == expected


def test_records_round_trip_through_json_and_keep_their_ids():
    family = registry.get("inventory_dp")
    models = sample_models(family, 2, seed=5, batch="b")
    solutions = solve_models(family, models)
    for record in [*models, *solutions]:
        again = type(record).model_validate_json(record.model_dump_json())
        assert again == record
        assert again.expected_id() == record.id
    assert np.array_equal(unpack_policy(solutions[0].policy), family.solve(models[0].theta).policy)


def test_ids_change_with_content_and_not_with_metadata():
    model = sample_models(registry.get("inventory_dp"), 1, seed=5, batch="b")[0]
    assert model.model_copy(update={"run_id": "another"}).expected_id() == model.model_id
    changed = model.model_copy(update={"theta": {**model.theta, "price": model.theta["price"] + 1}})
    assert changed.expected_id() != model.model_id


def test_records_refuse_unknown_fields_and_bad_values():
    with pytest.raises(ValidationError):
        ModelRecord(model_id="x", family="f", family_version="1", knobs={}, seed=-1, theta={}, batch="b")
    with pytest.raises(ValidationError):
        ModelRecord(model_id="x", family="f", family_version="1", knobs={}, seed=1, theta={}, batch="b", extra=1)


def test_environment_id_is_its_identity():
    fields = dict(family="f", presentation="I", model_id="m", solution_id="s", setter_output_id="o",
                  episode_seed=1, turn_budget=10)
    assert EnvironmentRecord.id_for("1", **fields) != EnvironmentRecord.id_for("1", **{**fields, "presentation": "A"})
    assert json.loads(canonical_json(fields)) == fields
