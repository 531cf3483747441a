"""The sandbox's warden: the process that starts every process running program code and never runs program
code itself. Standard library only, run as `python -s -S -m warden` from `execution/` (the package is not
importable in there on purpose); the supervisor (`execution/sandbox.py`) imports only `protocol` and `answers`.

  launcher ──fork──> warden: PID 1 of new pid, net, mount and ipc namespaces (without root, inside a user
     │               namespace), chrooted into a read-only root holding the stdlib and the libraries it loads
     │                └── zygote: forked once, before the first request, and never sent a program,
     │                    an answer or a request; on the warden's word it forks one of
     │                     ├── reader: reads the answer type of a long f given none, then is killed
     │                     ├── runner: runs g, sends its answer as ASCII JSON text, then is killed
     │                     ├── judge: runs f on that one answer, sends the verdict, then is killed
     │                     └── caller: runs a program and one call of its function (`apply`)
     └─ reports the warden's pid and exit status, then removes its cgroup (and workspace)

Modules: `protocol` (frames and the messages between supervisor and warden), `answers` (an answer as JSON text,
P3's answer types), `programs` (what runs inside a program process: compiling, running g, judging f),
`isolation` (the root, mounts, cgroups), `seccomp` (the syscall filters), `zygote`, and `main` (the warden's
request loop and its start).
"""
