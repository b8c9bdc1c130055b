"""The committed results pages are exactly what ``tools/reproduce.py --report-only`` writes from
the committed ``runs.json`` and study file (nobody edits a number by hand), and the verdict
category each page and the index show is the one the runner computes from the declared
outcome."""
import glob
import json
import os
import os.path as osp
import re
import shutil
import subprocess
import sys

import pytest

from mmstiff.studies import StudyNumbers, category, load_study

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
STUDIES = sorted(
    osp.basename(osp.dirname(p))
    for p in glob.glob(osp.join(REPO, 'docs', 'results', '*', 'runs.json')))


def read(*parts):
    with open(osp.join(REPO, *parts), encoding='utf-8') as f:
        return f.read()


@pytest.mark.slow
@pytest.mark.parametrize('name', STUDIES)
def test_committed_page_equals_the_regenerated_one(name, tmp_path):
    study_file = osp.join(REPO, 'configs', 'studies', f'{name}.py')
    assert osp.isfile(study_file), f'docs/results/{name}/ has no study file {study_file}'
    results = tmp_path / 'results'
    (results / name).mkdir(parents=True)
    shutil.copy(osp.join(REPO, 'docs', 'results', name, 'runs.json'), results / name)
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join(
            [REPO] + [p for p in os.environ.get('PYTHONPATH', '').split(os.pathsep) if p]))
    subprocess.run([
        sys.executable, 'tools/reproduce.py', study_file, '--report-only', '--results-dir',
        str(results)
    ], cwd=REPO, check=True, env=env, capture_output=True, text=True)
    committed = read('docs', 'results', name, 'README.md')
    assert (results / name / 'README.md').read_text(encoding='utf-8') == committed


@pytest.mark.parametrize('name', STUDIES)
def test_page_and_index_show_the_runners_category(name):
    study = load_study(osp.join(REPO, 'configs', 'studies', f'{name}.py'))
    assert study.outcome is not None, f'{name} declares no primary outcome'
    runs = json.loads(read('docs', 'results', name, 'runs.json'))
    expected = category(StudyNumbers(runs, study.outcome))
    page = read('docs', 'results', name, 'README.md')
    shown = re.findall(r'^- \*\*Verdict: ([a-z ]+)\*\*', page, flags=re.M)
    assert shown == [expected]
    # the prose names no other category (the runner refuses it; this checks the bytes)
    prose = page.split('## Verdict\n\n', 1)[1].split('\n', 1)[0]
    others = {
        'held': r'(?<!not )\bheld\b|\bconfirmed\b',
        'did not hold': r'\bdid not hold\b',
        'inconclusive': r'\binconclusive\b'
    }
    for other, pattern in others.items():
        if other != expected:
            assert not re.search(pattern, prose, flags=re.I), (other, prose)
    row = next(
        line for line in read('docs', 'results', 'README.md').splitlines()
        if line.startswith(f'| [{name}]('))
    assert row.split(' | ')[2] == expected
