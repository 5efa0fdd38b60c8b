"""TrainConfig's learning rates are checked where every run resolves its config (the CLI checked them;
a TrainConfig built in Python, as by `polyrec bench` or a notebook, trained on with any rate)."""

from __future__ import annotations

import math

import pytest

from polyrec.runtime.config import TrainConfig, resolve


@pytest.mark.parametrize(("changes", "message"), [
    ({"lr": -0.1}, "lr must be a finite number, 0 or more, got -0.1"),
    ({"lr": math.nan}, "lr must be a finite number, 0 or more, got nan"),
    ({"lr": math.inf}, "lr must be a finite number, 0 or more, got inf"),
    ({"embedding_lr": 0.0}, r"--embedding-lr must be a finite number above 0 \(leave it out to use --lr\), got 0.0"),
    ({"embedding_lr": -1.0}, "--embedding-lr must be a finite number above 0"),
    ({"embedding_lr": math.nan}, "--embedding-lr must be a finite number above 0"),
])
def test_a_rate_no_run_can_use_is_refused_naming_the_field(changes, message):
    with pytest.raises(ValueError, match=message):
        resolve(TrainConfig(device="cpu", **changes))


@pytest.mark.parametrize("changes", [{"lr": 0.0}, {"lr": 0.1, "embedding_lr": 0.02}, {"eval_every": 5000}])
def test_usable_rates_and_a_late_eval_are_accepted(changes):
    """lr 0 (weights held) as the CLI takes it; eval_every past steps only evaluates at the end."""
    assert resolve(TrainConfig(device="cpu", **changes)).device.type == "cpu"


@pytest.mark.parametrize("name", ["steps", "batch_size", "log_every", "eval_batches"])
def test_a_count_below_one_names_its_option(name):
    """Said `log_every must be at least 1` to a user who typed --log-every 0."""
    with pytest.raises(ValueError, match=f"^--{name.replace('_', '-')} must be at least 1, got 0$"):
        resolve(TrainConfig(device="cpu", **{name: 0}))


@pytest.mark.parametrize("seed", [2**64, -(2**63) - 1])
def test_a_seed_beyond_64_bits_names_its_option(seed):
    """Was torch's 'Overflow when unpacking long long' from inside the synthetic source."""
    with pytest.raises(ValueError, match=r"^--seed must be an integer from -2\*\*63 to 2\*\*63 - 1, got "):
        resolve(TrainConfig(device="cpu", seed=seed))
    assert resolve(TrainConfig(device="cpu", seed=2**63 - 1)).device.type == "cpu"
