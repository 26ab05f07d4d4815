"""Attacks in their own process, holding nothing secret.

``run_attack(attack, view)`` runs ``attack.run`` in a process that never shared the game's memory: never a
``fork`` of the arena, which would copy its memory, membership labels, targets and run secret included, into the
child. On Linux it is forked from the arena's *fork server*: an interpreter exec'd (``subprocess``) from the arena
with the arena's environment less ``ARENA_RUN_SECRET``, its standard output discarded, working directory ``/``,
that imports torch, NumPy and the arena's own modules (``arena.*``, ``arena_plugins.*``: never a third party's, so
no plugin's code runs there) and otherwise only receives descriptors: per attack, the attack's pipe, a status
socket, and the arena's stdout and stderr. It never sees a view, a store or a secret, so neither does what it
forks; the fork only spares each attack the ~2.5 s of a fresh interpreter importing torch. The arena starts it on
first use, or with ``start()`` (the serial tournament, before forking its matchups, which share it); it exits
when every arena end of its socket is closed, killing what runs. Elsewhere, or with ``ARENA_SANDBOX_EXEC`` set,
each attack gets a fresh interpreter (``subprocess`` with exec) instead. Either way, the process then takes the
arena's current environment less the secret, import path, stdout and stderr, Python's, NumPy's and torch's
random states as a fresh interpreter has them, and everything below holds. What the child receives is built from
the view's granted items alone:

* plain values: tensors, arrays, numbers, strings, tuples, ``None``, and ``Models`` (only where a view grants
  them, i.e. the ``parameters`` capability);
* for a query interface (``BlackBox``, capability ``query``) a proxy whose ``predict_proba``, ``log_proba`` and
  ``loss`` send their tensors over a pipe to this process, which answers from the released model: the child
  holds no parameter;
* for a label-only interface (``labels``) a proxy answering ``predict`` (argmax labels) the same way;
* for the training procedure (``training``) a proxy: calling it, or its ``train_chunks``, trains in this process
  (through the run's cache) and returns the trained ``Models``; it carries the procedure's public description
  (``defense``, ``arch``, ``recipe``, ``solver``, ``device``, ``chunk``), never the cache or any path.

Anything else in a view is refused (``TypeError``) rather than sent. The child's environment lacks
``ARENA_RUN_SECRET``; its only open descriptors are the pipe and the standard streams; its working directory is
``/``. Run as root, it imports the modules it needs (the attack's, the view's, the model's and the defense's)
and then drops to the user ``nobody`` (no supplementary groups) before the attack object and its view are
unpickled; it then cannot read the run directory (mode 0700), the secret (0600), the memory or environment of the
arena or of its parent (``/proc/<pid>/mem``, ``environ``: another user's), nor signal them. It dies with its
parent (``PR_SET_PDEATHSIG``); forked, it is killed by the fork server when its arena's end of the status socket
closes (the arena died, or gave up on it) and when the server exits; its other descriptors are all closed.

What comes back from the child is never unpickled: every message is a JSON header and raw tensor bytes, and the
guess is rebuilt only as a guess class the game declares (``Game.Guess``, through ``guess_types(game)``). An
exception, ``sys.exit``, ``os._exit``, a signal or a timeout in the child is raised here as ``AttackFailed``,
which fails the matchup.

The package, by side: ``wire`` (the message format both sides speak), ``parent`` (the arena's side: the view
handed over, the calls answered, ``run_attack``), ``server`` (how the attack's process starts: the fork server,
or a fresh interpreter), ``child`` (the attack's process: the user change, the proxies, the guess sent back).
"""

from arena.pipeline.sandbox.parent import AttackFailed, guess_types, run_attack
from arena.pipeline.sandbox.server import SECRET_ENV, start
from arena.pipeline.sandbox.wire import decode, encode

__all__ = ["SECRET_ENV", "AttackFailed", "decode", "encode", "guess_types", "run_attack", "start"]
