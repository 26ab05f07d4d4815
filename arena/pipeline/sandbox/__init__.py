"""Attacks in their own processes, holding nothing secret, apart from each other: no attack code in the arena.

The arena never imports an attack's module for playing it, never builds an attack, reads an attribute of one or
pickles one. It knows an attack by an ``AttackRef`` (``static``): the registered class's ``name``, ``game``,
``threat_model`` and ``version`` read statically from the class dictionaries (plain ``str`` and ``frozenset``,
checked), where its class is (``module:qualname``) and its parameters as JSON. The game builds the view from
that planned threat model and scores the guess with it. ``AttackProcess(ref, track=...)`` starts the attack's
process, which imports the class, validates the parameters, builds the attack and answers ``skip_reason``;
``run(view)`` hands it the view and serves it until its guess comes back. (``run_attack(ref, view)`` does both.)

The attack's process is never a ``fork`` of the arena, which would copy its memory (membership labels, targets,
the run secret) into it. On Linux it is forked from the arena's *fork server*: an interpreter exec'd from the
arena with the arena's environment less ``ARENA_RUN_SECRET``, working directory ``/``, that imports torch, NumPy
and the arena's own modules (``arena.*``, ``arena_plugins.*``, never a third party's) and otherwise only
receives descriptors. The arena starts it on first use, or with ``start()`` (a serial run, while it plans;
its worker processes share it). Elsewhere, or with ``ARENA_SANDBOX_EXEC`` set, each attack gets a fresh
interpreter instead. Either way the process takes the arena's environment less the secret, its import path, the
random states of a fresh interpreter, and:

* its own session and process group; run as root, its own user (``uid_base`` + its pid, see ``limits``), with no
  supplementary groups, taken before any of the attack's code runs: it cannot read the run directory (0700),
  the secret (0600), the memory, environment or files of the arena or of another attack, nor signal, stop or
  trace them; ``RLIMIT_NPROC``, ``RLIMIT_AS``, ``RLIMIT_FSIZE``, no core dumps and ``PR_SET_NO_NEW_PRIVS``;
* its own pipe for standard output and error, relayed by the arena with control characters escaped and a cap;
* a view built from the granted items alone: plain values (tensors, arrays, numbers, strings, tuples, ``None``,
  ``Models`` where ``parameters`` is granted); for ``query`` a proxy whose ``predict_proba``, ``log_proba`` and
  ``loss`` are answered by the arena from the released model; for ``labels`` a proxy answering ``predict``; for
  ``training`` a proxy that trains in the arena (through the run's cache, up to a per-matchup share of it) and
  carries the procedure's public description (``defense``, ``arch``, ``recipe``, ``solver``, ``device``,
  ``chunk``), never the cache or any path. Anything else in a view is refused (``TypeError``).

Every request is within quotas (message bytes, rows per query, model-record-epochs per training call and per
matchup); a refusal fails the attack's matchup. When the matchup ends (or the arena dies: ``PR_SET_PDEATHSIG``,
the closed status socket), the fork server, a child subreaper, kills the attack's process group and every
process of its user, and removes the files that user left in the scratch directories.

What comes back is never unpickled: every message is a JSON header and raw tensor bytes, and the guess is
rebuilt only as a guess class the game declares (``guess_types(game)``). An exception, ``sys.exit``,
``os._exit``, a signal, a refusal or a timeout in the attack's process is raised as ``AttackFailed`` (its text
capped and escaped), which fails the matchup; the fork server's death under it is ``ServerDied``, the arena's
fault, played again like a worker's death.

Third-party plugins that register attacks only are never imported by the arena either: ``catalog`` imports them
in a sandboxed process, which answers what they register (their attacks' declarations, read statically), and
validates their attacks' parameters (pydantic's errors come back as data, for the plan to report). Untrusted
attack distributions live in the untrusted site (``arena.trust``), never on the arena's path: the catalog's and
validation's processes, and the process of an attack from there (``AttackRef.site``), add it with
``site.addsitedir`` after the user change, so its ``.pth`` start-up files run there and nowhere else.

The package, by side: ``static`` (the attack as the arena knows it), ``wire`` (the message format both sides
speak), ``limits`` (quotas, process limits, escaping), ``catalog`` (third-party plugins listed and
attacks' parameters validated, in the sandbox), ``parent`` (the arena's side: the process started and served,
``AttackProcess``, ``run_attack``), ``server`` (how the attack's process starts and ends: the fork
server, or a fresh interpreter), ``child`` (the attack's process: limits, the user change, the attack built, the
proxies, the guess sent back).
"""

from arena.pipeline.sandbox.limits import ARTIFACT_CHARS, ERROR_CHARS, TRACEBACK_CHARS, Limits, clip_text, printable
from arena.pipeline.sandbox.parent import AttackFailed, AttackProcess, ServerDied, guess_types, run_attack
from arena.pipeline.sandbox.server import SECRET_ENV, start
from arena.pipeline.sandbox.static import AttackRef, attack_ref, static_attack
from arena.pipeline.sandbox.wire import decode, encode

__all__ = ["ARTIFACT_CHARS", "ERROR_CHARS", "SECRET_ENV", "TRACEBACK_CHARS", "AttackFailed", "AttackProcess",
           "AttackRef", "Limits", "ServerDied", "attack_ref", "clip_text", "decode", "encode", "guess_types",
           "printable", "run_attack", "start", "static_attack"]
