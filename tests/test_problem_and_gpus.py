import pytest

from autotune.errors import InputError
from autotune.gpu_specs import GPUS, device_key, gpu_spec, spec_for_device, spec_from_properties
from autotune.problem import GemmProblem, make_problem, parse_shape


@pytest.mark.parametrize("text, expected", [
    ("4096", (4096, 4096, 4096)),
    ("17x33x65", (17, 33, 65)),
    (" 128X64x32 ", (128, 64, 32)),
    ("1", (1, 1, 1)),
])
def test_parse_shape(text, expected):
    assert parse_shape(text) == expected


@pytest.mark.parametrize("text", ["0", "-5", "4096x4096", "12x", "axbxc", "", "1x0x3", "4096.0"])
def test_bad_shapes_name_the_value(text):
    with pytest.raises(InputError) as info:
        parse_shape(text)
    assert repr(text) in str(info.value)
    assert "MxNxK" in str(info.value)


def test_problem_flops_and_dtype():
    problem = make_problem("2x3x4", "f32")
    assert problem.flops == 48
    assert problem.tflops(1.0) == pytest.approx(48 / 1e-3 / 1e12)
    with pytest.raises(InputError, match="f64.*f32, f16, bf16"):
        make_problem("4096", "f64")
    with pytest.raises(InputError):
        GemmProblem(0, 1, 1)


def test_gpu_lookup_lists_choices():
    assert gpu_spec("H200").arch == 90
    with pytest.raises(InputError) as info:
        gpu_spec("v100")
    assert "'v100'" in str(info.value) and "t4" in str(info.value) and "auto" in str(info.value)


@pytest.mark.parametrize("name, key", [
    ("NVIDIA H200", "h200"), ("NVIDIA H100 80GB HBM3", "h100"), ("Tesla T4", "t4"),
    ("NVIDIA A100-SXM4-80GB", "a100"), ("NVIDIA GeForce RTX 3090", "rtx3090"), ("NVIDIA L4", "l4"),
])
def test_device_names_match_specs(name, key):
    assert spec_for_device(name).key == key


def test_unknown_devices_do_not_match():
    assert spec_for_device("NVIDIA L40S") is None
    assert spec_for_device("NVIDIA GeForce RTX 4090") is None


def test_spec_limits_are_consistent():
    for spec in GPUS.values():
        assert spec.smem_per_block == 48 * 1024
        assert spec.smem_per_block < spec.smem_per_block_optin <= spec.smem_per_sm
    assert not GPUS["t4"].has_cp_async and GPUS["a100"].has_cp_async


@pytest.mark.parametrize("text", ["46341", "65536x32768x1", "1x2147483648x1", "123456789012345"])
def test_shapes_past_32_bit_indexing_name_the_limit(text):
    with pytest.raises(InputError, match="2147483647"):
        parse_shape(text)


def test_the_largest_32_bit_shapes_are_accepted():
    assert parse_shape("46340") == (46340, 46340, 46340)
    assert parse_shape("1x2147483647x1") == (1, 2147483647, 1)
    with pytest.raises(InputError, match="shape"):
        GemmProblem(46341, 46341, 1)
    with pytest.raises(InputError):
        GemmProblem(True, 1, 1)


def test_the_fake_gpu_has_the_real_ones_limits_under_its_own_key():
    fake = gpu_spec("h200-fake")
    assert fake.key == "h200-fake" and fake.smem_per_block_optin == GPUS["h200"].smem_per_block_optin
    with pytest.raises(InputError, match="'v100-fake'"):
        gpu_spec("v100-fake")


@pytest.mark.parametrize("name, key", [
    ("NVIDIA RTX A6000", "rtx-a6000"), ("NVIDIA GeForce RTX 4090", "geforce-rtx-4090"),
    ("NVIDIA L40S", "l40s"), ("Tesla V100-SXM2-16GB", "tesla-v100-sxm2-16gb"), ("NVIDIA", "gpu"),
    ("NVIDIA B200 (x; rm -rf ~)", "b200-x-rm-rf"),
])
def test_device_keys_are_made_from_names(name, key):
    assert device_key(name) == key


PROPERTIES = {"sms": 142, "smem_per_block": 49152, "smem_per_block_optin": 101376, "smem_per_sm": 102400,
              "regs_per_sm": 65536, "regs_per_block": 65536, "max_threads_per_block": 1024,
              "max_threads_per_sm": 1536, "l2_bytes": 96 * 1024 * 1024, "pci_bus_id": "0000:01:00.0"}


def test_a_spec_from_device_properties():
    spec = spec_from_properties("NVIDIA L40S", "sm_89", PROPERTIES)
    assert (spec.key, spec.sm, spec.sms, spec.smem_per_block_optin, spec.l2_bytes) == \
        ("l40s", "sm_89", 142, 101376, 96 * 1024 * 1024)
    assert spec_from_properties("NVIDIA B200", "sm_100a", PROPERTIES).arch == 100
    with pytest.raises(InputError, match="sm_75 or newer"):
        spec_from_properties("Tesla V100", "sm_70", PROPERTIES)
    with pytest.raises(InputError, match="smem_per_block_optin"):
        spec_from_properties("NVIDIA L40S", "sm_89", {**PROPERTIES, "smem_per_block_optin": 0})
    with pytest.raises(InputError, match="'compute_89'"):
        spec_from_properties("NVIDIA L40S", "compute_89", PROPERTIES)
