"""The project's documentation references resolve, and nothing points outside the repository.

(a) Every ``docs/<page>.md`` named in the code, tests, configs, README or docs exists, and every
    section it cites (``docs/methods.md §5``, ``§0-§4``, ``§6, §7``) is a heading of that page.
(b) No file of the repository refers to documents that are not in it: private design notes,
    local copies of papers, or absolute paths of a particular machine.

Both checks are plain functions of a root folder, so the tests below also run them on planted
bad references in a temporary folder and assert that they are caught.
"""
import os
import os.path as osp
import re
import subprocess

import pytest

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))
THIS_FILE = osp.relpath(osp.abspath(__file__), REPO)

#: folders (and files) whose references into docs/ must resolve.
REFERRING = ('mmstiff', 'tools', 'tests', 'configs', 'docs', 'README.md')
TEXT_SUFFIXES = ('.py', '.md', '.sh', '.txt', '.cfg', '.ini', '.toml', '.yml', '.yaml', '.json',
                 '.rst')
SKIP_DIRS = {'.git', '.venv', '__pycache__', 'work_dirs', 'data', 'build', 'dist'}

#: ``docs/<page>.md`` followed by optional section citations: §5 | §0-§4 | §0–4 | §6, §7 | §5 and §8
DOC_REF = re.compile(r'docs/([\w.-]+?\.md)((?:\s*(?:,|and|&)?\s*§\d+(?:\s*[-–]\s*§?\d+)?)*)')
SECTION = re.compile(r'§(\d+)(?:\s*[-–]\s*§?(\d+))?')
HEADING_SECTION = re.compile(r'^#{1,6}\s+§(\d+)\b', re.MULTILINE)

PAPER_STEMS = (r'(?:stepnet-appendix|stepnet-summary|how-do-vits-work|'
               r'anti-oversmoothing-attnscale-featscale|augmented-shortcuts-supplement)')
#: references to documents outside the repository, with why each is refused.
OUTSIDE = [
    (re.compile(r'\b(?:METHODS|ARCHITECTURE|STYLE|ENVIRONMENT)\.md'),
     'a design note outside the repository; cite docs/methods.md or docs/design.md'),
    (re.compile(r'\.\./(?:shared|papers)\b'), 'a path outside the repository'),
    (re.compile(r'(?<![\w.])/work/'), 'an absolute path of one machine'),
    (re.compile(r'\bpapers/[\w.-]+\.(?:txt|md|pdf)\b'),
     'a local copy of a paper; cite the paper by title and arXiv link'),
    # the stems of local paper copies, bare or as file names; a public repository that shares
    # a name (github.com/<owner>/how-do-vits-work) is a valid citation
    (re.compile(rf'(?<![/\w-]){PAPER_STEMS}\b|{PAPER_STEMS}\.(?:txt|md|pdf)\b'),
     'the file name of a local copy of a paper; cite the paper by title and arXiv link'),
]


def read_text(path):
    """The file's text, or None for a binary / non-UTF-8 file."""
    try:
        with open(path, encoding='utf-8') as f:
            text = f.read()
    except (UnicodeDecodeError, OSError):
        return None
    return None if '\x00' in text else text


def walk_text_files(root, entries):
    """Relative paths of the text files under ``entries`` (folders or files) of ``root``."""
    found = []
    for entry in entries:
        path = osp.join(root, entry)
        if osp.isfile(path):
            found.append(entry)
            continue
        for folder, dirs, files in os.walk(path):
            dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.endswith('.egg-info'))
            for name in sorted(files):
                if name.endswith(TEXT_SUFFIXES):
                    found.append(osp.relpath(osp.join(folder, name), root))
    return found


def repository_files(root):
    """Tracked files and new files git does not ignore; every text file when git is absent."""
    try:
        out = subprocess.run(
            ['git', 'ls-files', '--cached', '--others', '--exclude-standard', '-z'], cwd=root,
            capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return walk_text_files(root, sorted(os.listdir(root)))
    return sorted(
        {p
         for p in out.decode('utf-8').split('\0') if p and osp.isfile(osp.join(root, p))})


def cited_sections(citations):
    """``' §0-§2, §5'`` -> ``[0, 1, 2, 5]``."""
    sections = []
    for first, last in SECTION.findall(citations):
        first = int(first)
        last = int(last) if last else first
        sections.extend(range(first, last + 1) if last >= first else [first, last])
    return sections


def doc_references(text):
    """``[(line, page, [sections])]`` of the ``docs/<page>.md`` references in ``text``."""
    refs = []
    for match in DOC_REF.finditer(text):
        line = text.count('\n', 0, match.start()) + 1
        refs.append((line, match.group(1), cited_sections(match.group(2))))
    return refs


def heading_sections(markdown):
    """The section numbers of the headings ``## §n ...`` of a markdown page."""
    return {int(n) for n in HEADING_SECTION.findall(markdown)}


def broken_doc_references(root, entries=REFERRING, skip=(THIS_FILE, )):
    """Messages for references into ``docs/`` that do not resolve (empty when all do)."""
    problems = []
    pages = {}
    for rel in walk_text_files(root, entries):
        if rel in skip:
            continue
        text = read_text(osp.join(root, rel))
        if text is None:
            continue
        for line, page, sections in doc_references(text):
            if page not in pages:
                page_text = read_text(osp.join(root, 'docs', page))
                pages[page] = None if page_text is None else heading_sections(page_text)
            if pages[page] is None:
                problems.append(f'{rel}:{line}: docs/{page} does not exist')
                continue
            missing = [n for n in sections if n not in pages[page]]
            if missing:
                problems.append(f'{rel}:{line}: docs/{page} has no section '
                                f'{", ".join(f"§{n}" for n in missing)} (it has '
                                f'{sorted(pages[page])})')
    return problems


def outside_references(root, files, skip=(THIS_FILE, )):
    """Messages for every reference to a document outside the repository in ``files``."""
    problems = []
    for rel in files:
        if rel in skip:
            continue
        text = read_text(osp.join(root, rel))
        if text is None:
            continue
        for pattern, why in OUTSIDE:
            for match in pattern.finditer(text):
                line = text.count('\n', 0, match.start()) + 1
                problems.append(f'{rel}:{line}: {match.group(0)!r} is {why}')
    return problems


# ---------------------------------------------------------------------- the repository


def test_methods_page_has_sections_0_to_16():
    text = read_text(osp.join(REPO, 'docs', 'methods.md'))
    assert text is not None, 'docs/methods.md is missing'
    assert heading_sections(text) == set(range(17))


@pytest.mark.parametrize('page', [
    'docs/methods.md', 'docs/diagnostics.md', 'docs/design.md', 'docs/install.md',
    'docs/training.md', 'docs/benchmarks.md', 'docs/reliability.md', 'docs/alternet.md',
    'configs/README.md'
])
def test_readme_links_each_page(page):
    readme = read_text(osp.join(REPO, 'README.md'))
    assert f'({page})' in readme
    assert osp.isfile(osp.join(REPO, page))


def test_readme_is_short_and_starts_with_the_quick_start():
    lines = read_text(osp.join(REPO, 'README.md')).splitlines()
    assert len(lines) <= 250, f'README.md has {len(lines)} lines; move details to docs/'
    quick = [n for n, line in enumerate(lines, 1) if line.startswith('## Quick start')]
    assert quick and quick[0] < 60, f'"## Quick start" at line {quick}, expected before line 60'


def test_every_docs_reference_resolves():
    problems = broken_doc_references(REPO)
    assert not problems, 'references into docs/ that do not resolve:\n' + '\n'.join(problems)


def test_the_code_cites_docs():
    # guards the check above against silently matching nothing
    refs = [
        ref for rel in walk_text_files(REPO, ('mmstiff', ))
        for ref in doc_references(read_text(osp.join(REPO, rel)) or '')
    ]
    assert any(page == 'methods.md' and sections for _, page, sections in refs)


def test_nothing_refers_outside_the_repository():
    problems = outside_references(REPO, repository_files(REPO))
    assert not problems, 'references outside the repository:\n' + '\n'.join(problems)


# ---------------------------------------------------------------------- the checks themselves


def test_section_citations_are_parsed_with_ranges_and_lists():
    text = ('see docs/methods.md §0-§2, §5 and docs/design.md\n'
            '(docs/methods.md §6, §7; paper §3.1) docs/methods.md §8–9')
    assert doc_references(text) == [(1, 'methods.md', [0, 1, 2, 5]), (1, 'design.md', []),
                                    (2, 'methods.md', [6, 7]), (2, 'methods.md', [8, 9])]


@pytest.fixture
def planted(tmp_path):
    """A tiny repository with one good page and a few bad references."""
    (tmp_path / 'docs').mkdir()
    (tmp_path / 'docs' / 'methods.md').write_text('# Methods\n\n## §0 Steps\n\n## §1 StepNet\n')
    (tmp_path / 'mmstiff').mkdir()
    (tmp_path / 'mmstiff' / 'good.py').write_text('"""Steps (docs/methods.md §0, §1)."""\n')
    return tmp_path


def test_planted_good_references_pass(planted):
    (planted / 'mmstiff' / 'cite.py').write_text('# the public code: github.com/xxxnell/how-do-'
                                                 'vits-work, arXiv:2202.06709\n')
    assert broken_doc_references(str(planted)) == []
    assert outside_references(str(planted), ['mmstiff/good.py', 'mmstiff/cite.py']) == []


@pytest.mark.parametrize('line, expected', [
    ('"""Adaptor (docs/methods.md §2)."""', 'has no section §2'),
    ('"""Adaptor (docs/methods.md §0-§3)."""', 'has no section §2, §3'),
    ('# see docs/missing.md', 'docs/missing.md does not exist'),
])
def test_planted_broken_doc_reference_is_caught(planted, line, expected):
    (planted / 'mmstiff' / 'bad.py').write_text(f'import os\n{line}\n')
    problems = broken_doc_references(str(planted))
    assert len(problems) == 1 and problems[0].startswith('mmstiff/bad.py:2: ')
    assert expected in problems[0]


@pytest.mark.parametrize('line', [
    '"""StepNet adaptor (' + 'METHODS.md §1)."""',
    '# the spec is in ../' + 'shared/design',
    '# read /' + 'work/shared/papers/x.txt',
    '"""NSI (' + 'papers/stepnet-appendix.txt, Appendix B)."""',
    '"""Noise (how-do-' + 'vits-work Fig. 2b)."""',
    '# the paper text: how-do-' + 'vits-work.txt',
])
def test_planted_outside_reference_is_caught(planted, line):
    (planted / 'mmstiff' / 'bad.py').write_text(f'import os\n{line}\n')
    problems = outside_references(str(planted), ['mmstiff/good.py', 'mmstiff/bad.py'])
    assert problems and all(p.startswith('mmstiff/bad.py:2: ') for p in problems)
