"""The committed results pages are exactly what ``tools/reproduce.py --report-only`` writes from
the committed ``runs.json`` and study file: nobody edits a number by hand."""
import glob
import os.path as osp
import shutil
import subprocess
import sys

import pytest

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
STUDIES = sorted(osp.basename(osp.dirname(p))
                 for p in glob.glob(osp.join(REPO, 'docs', 'results', '*', 'runs.json')))


@pytest.mark.slow
@pytest.mark.parametrize('name', STUDIES)
def test_committed_page_equals_the_regenerated_one(name, tmp_path):
    study_file = osp.join(REPO, 'configs', 'studies', f'{name}.py')
    assert osp.isfile(study_file), f'docs/results/{name}/ has no study file {study_file}'
    results = tmp_path / 'results'
    (results / name).mkdir(parents=True)
    shutil.copy(osp.join(REPO, 'docs', 'results', name, 'runs.json'), results / name)
    subprocess.run([sys.executable, 'tools/reproduce.py', study_file, '--report-only',
                    '--results-dir', str(results)], cwd=REPO, check=True,
                   capture_output=True, text=True)
    with open(osp.join(REPO, 'docs', 'results', name, 'README.md'), encoding='utf-8') as f:
        committed = f.read()
    assert (results / name / 'README.md').read_text(encoding='utf-8') == committed
