import pytest

from tff_quant.common import dims


@pytest.mark.parametrize('n, rotate, expected', [
    (1, True, 1), (2, True, 2), (3, True, 4), (259, True, 512),
    (61706, True, 65536), (65536, True, 65536), (259, False, 259)])
def test_sent_dim_pads_to_a_power_of_two_only_when_rotating(n, rotate, expected):
  assert dims.sent_dim(n, rotate) == expected


@pytest.mark.parametrize('bad', [0, -3, 2.0, True, None])
def test_sent_dim_refuses_what_is_no_coordinate_count(bad):
  with pytest.raises(ValueError, match='`num_coordinates` must be an integer >= 1'):
    dims.sent_dim(bad, True)
