"""The factories' refusal of a mechanism that gives no privacy, readable
without TensorFlow (`tff_quant.aggregators`): a training run checks the
parameters it is given with it before TensorFlow starts."""

import math

from tff_quant.mechanisms import base

#: A mechanism that needs δ >= this for any finite ε gives no privacy.
NO_PRIVACY_MASS = 0.5


def refuse_no_privacy(mech: base.Mechanism) -> None:
  """Refuses a mechanism that gives no privacy: one whose output laws for
  some two inputs overlap so little that no (ε, δ) with δ < 1/2 exists
  (`accounting.impossible_mass` >= NO_PRIVACY_MASS; e.g. PBM θ = 1/2, QMGeo
  as written). What a factory checks (unless `allow_no_privacy`), and what a
  training run checks of the parameters it is given before calibrating.

  Args:
    mech: the mechanism.

  Raises:
    ValueError: it gives no privacy (naming the inputs and the mass).
  """
  from tff_quant.accounting import divergence  # pylint: disable=g-import-not-at-top
  mass, x, x_other = divergence.impossible_mass(mech)
  if mass >= NO_PRIVACY_MASS:
    where = (f' (inputs {x:.4g} and {x_other:.4g})'
             if math.isfinite(x) and math.isfinite(x_other) else '')
    raise ValueError(
        f'{mech} gives no privacy: for two inputs{where}, probability '
        f'{mass:.3g} of one\'s output is impossible for the other, so no '
        f'(ε, δ) with δ < {mass:.3g} exists. Change its parameters, or pass '
        'allow_no_privacy=True to study it.')
