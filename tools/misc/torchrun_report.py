#!/usr/bin/env python
"""torchrun's stderr, as tools/dist_run.sh shows it: a user's mistake ends in rank 0's line.

Reads stderr of ``torchrun`` (its processes' and its own) and passes every line through, except
torchrun's own report of a run that stopped on a user's mistake: once a process has printed an
``error: ...`` line (:mod:`mmstiff.tool_main`, rank 0 only), the lines after it are held, and
dropped at the end when they are torchrun's report (its log lines and the ``ChildFailedError``
summary) of processes that all exited with status 1 or were stopped by torchrun (SIGTERM);
otherwise (a crash, a signal from outside, more output of the tool) they are printed as they
were. Standard library only.
"""
import re
import sys

#: the exit codes of a run stopped on a user's mistake: 1, and -15 for the processes torchrun
#: stopped after the first one failed
USER_MISTAKE_CODES = {'1', '-15'}
EXIT_CODE = re.compile(r'exitcode\s*:\s*(-?\d+)')
#: torchrun's log lines ("W1201 20:02:14.098000 18318 .../torch/distributed/elastic/...")
AGENT_LINE = re.compile(r'^[IWE]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ \S*torch/distributed/')


def torchrun_report_only(held):
    """Whether the lines ``held`` after the error line are only torchrun's report of a run
    stopped on a user's mistake."""
    text = ''.join(held)
    if 'ChildFailedError' not in text:
        return not any(line.strip() and not AGENT_LINE.match(line) for line in held)
    report = text[text.index('Traceback (most recent call last):'):] \
        if 'Traceback (most recent call last):' in text else text
    before = text[:len(text) - len(report)].splitlines(keepends=True)
    codes = set(EXIT_CODE.findall(report))
    return (codes <= USER_MISTAKE_CODES and bool(codes)
            and all(not line.strip() or AGENT_LINE.match(line) for line in before))


def main(stream=sys.stdin, out=sys.stderr):
    held = None
    for line in stream:
        if held is not None:
            held.append(line)
            continue
        out.write(line)
        out.flush()
        if line.startswith('error: '):
            held = []
    if held and not torchrun_report_only(held):
        out.write(''.join(held))
    out.flush()


if __name__ == '__main__':
    main()
