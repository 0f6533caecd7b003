"""The half of every sandbox that runs inside it: the keeper, the supervisor and the kernels.

Standard library only, and shipped as source: `mappa_envs.sandbox.launch` embeds these modules in
one `python3 -I -c` command line, so they run in a bwrap namespace or a Docker container where the
project is not installed. They import each other relatively (`from . import procs`) and nothing else
of the project; the host imports `protocol` and `files` from here too, so both ends share one
definition of the frame format and of the workspace walk.

Process tree inside a local (bwrap) sandbox, and what each one may do:

    keeper (pid 1)      holds the namespaces and the workspace tmpfs; restarts a dead supervisor
      supervisor        runs no user code; owns every pipe, clock and cap the host trusts
        kernel "main"   one forked interpreter per kernel name, each with its own uid where the
        kernel "b"      sandbox can set uids (root-started bwrap, Docker), paused between its cells

The Docker backend has no keeper (the container holds the workspace); the supervisor is started
with `docker exec`.
"""
