"""The small run many checks share: problem (27) with n = 6 clients, a few rounds."""

import jax

import fedjax_abc as fa

SETTINGS = dict(local_steps=2, rounds=8, trials=3, key=jax.random.key(0), record_every=4)


def small_problem():
    return fa.problems.huber_offsets(jax.random.key(0), n=6, d_max=10.0)


def small_run_args(problem, **kw):
    """simulate's arguments of the small run on ``problem``, ``kw`` put in."""
    args = dict(num_sampled=2, stepsize=0.05, x0=problem.x_star + 2.0, **SETTINGS)
    args.update(kw)
    return args


def small_run(problem, **kw):
    """The small run on ``problem``; a sampler given takes num_sampled's place."""
    args = small_run_args(problem, **kw)
    if "sampler" in kw:
        del args["num_sampled"]
    return fa.simulate(problem, **args)
