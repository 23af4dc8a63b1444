"""Varied requests for the target to answer, when no prompt file is given.

An MTP head drafts the target's answers to what users ask: code, edits,
fixes, explanations and prose. With no corpus of instructions on every
machine, requests are built from templates and the names, signatures and
docstrings of Python's own standard library, in a seeded order. Every
`HELD_OUT_EVERY`-th request is held out: never trained on, it measures the head.
What they leave out is `left_out()`: the packaged prompt set, the same in a
checkout and a wheel, so a seed gives the same requests wherever it runs.
"""

from __future__ import annotations

import ast
import random
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from ..errors import SpecmlxError
from ..prompting import PromptRow, packaged_prompts_path, read_prompts

HELD_OUT_EVERY = 20
# Topics, tasks and numbers that would repeat one of the bench's prompts are left out of the lists below.
MAX_SNIPPET_LINES = 14

LANGUAGES = ("Python", "Python", "Python", "JavaScript", "TypeScript", "Rust", "Go", "C", "bash", "Java")
CODE = (  # stdlib docstrings open imperatively ("Return the ..."): quoted as the task
    "Write a {lang} function `{name}`. It should do this: {doc}",
    "Implement `{name}` in {lang}. Its job: {doc} Include a short example of its use.",
    "In {lang}, write `{name}`. {doc} Keep it short and add comments.",
    "Write a {lang} function for this task: {doc} Add type hints where the language has them.",
    "Show me how to write `{name}` in {lang}. Docstring: \"{doc}\"",
)
SNIPPET = (
    ("explain", "Explain what this code does, line by line:\n\n```python\n{code}\n```"),
    ("explain", "What does this function return, and when? Answer briefly.\n\n```python\n{code}\n```"),
    ("edit", "Add type hints and a docstring to this function, and return the full updated code:\n\n```python\n{code}\n```"),
    ("edit", "Rewrite this function to be more readable, and return the full code:\n\n```python\n{code}\n```"),
    ("edit", "Rename the variable `{var}` to `{new}` everywhere in this code and return the full code:\n\n```python\n{code}\n```"),
    ("fix", "This function has a bug: it fails on empty input. Fix it and explain the fix:\n\n```python\n{code}\n```"),
    ("test", "Write pytest tests for this function:\n\n```python\n{code}\n```"),
)
TOPICS = (
    "TCP and UDP", "a list and a tuple in Python", "git merge and git rebase",
    "stack and heap memory", "unit tests and integration tests", "SQL and NoSQL databases",
    "synchronous and asynchronous code", "compiled and interpreted languages", "HTTP GET and POST",
    "a hash map and a binary search tree", "mutexes and semaphores", "REST and GraphQL",
    "static and dynamic typing", "caching and memoization", "horizontal and vertical scaling",
)
CHAT = (
    ("chat", "What is the difference between {topic}? Answer {length}."),
    ("chat", "Give me {n} tips for {task}."),
    ("chat", "Explain {concept} to {audience} {length}."),
    ("chat", "When should I use {concept}? Give {n} examples."),
    ("chat", "What are common mistakes with {concept}, and how do I avoid them? Answer {length}."),
    ("summarize", "Summarize in {n} sentences: {doc}"),
    ("summarize", "Rewrite this documentation more clearly for {audience}: {doc}"),
)
AUDIENCES = ("a junior developer", "a student", "a product manager", "an experienced C programmer", "a data scientist")
LENGTHS = ("in a short paragraph", "in four sentences", "in three bullet points", "briefly", "with an example")
TASKS = (
    "reviewing code", "naming variables", "debugging a crash",
    "writing documentation", "speeding up a slow Python script", "structuring a small project",
    "handling errors in Python", "writing good tests", "learning a new programming language",
    "designing a REST API", "keeping dependencies up to date",
)
CONCEPTS = (
    "recursion", "big-O notation", "a closure", "dependency injection", "a race condition", "garbage collection",
    "a generator in Python", "binary search", "a deadlock", "an index in a database", "a context manager",
    "immutability", "a virtual environment", "regular expressions", "a message queue", "speculative execution",
)
MATH = (
    "A cyclist rides {a} km in {b} hours. How fast is that in km/h? Show the steps.",
    "A shop sells pens at {a} cents each. How much do {b} pens cost in dollars? Show the steps.",
    "What is {a} percent of {c}? Show the steps.",
    "A rectangle is {a} cm by {b} cm. What are its area and perimeter? Show the steps.",
    "If {a} workers build a wall in {b} days, how long do {c} workers take? Show the steps.",
)


def left_out() -> frozenset[str]:
    """The prompts generated requests never repeat: the packaged prompt set, the bench's default.

    Only the package's own files count, never one found beside a checkout (the
    shared bench set, say): the requests for a seed must not depend on where
    specmlx is installed. The templates above already avoid that set's topics.
    """
    return frozenset(r.prompt for r in read_prompts(packaged_prompts_path()))


def held_out(index: int) -> bool:
    return index % HELD_OUT_EVERY == 0


def generate_prompts(count: int, seed: int = 0, exclude: frozenset[str] | set[str] = frozenset()) -> list[PromptRow]:
    """`count` distinct requests, the same for the same seed, none of them in `exclude`
    (`specmlx train` passes `left_out()`)."""
    rng = random.Random(seed)
    functions = _stdlib_functions(rng)
    if not functions:
        raise SpecmlxError("found no Python standard library sources to build prompts from")
    seen = set(exclude)
    requests: list[PromptRow] = []
    makers = (_code, _code, _code, _snippet, _snippet, _chat, _chat, _math)
    attempts = 0
    while len(requests) < count and attempts < count * 20:
        attempts += 1
        kind, prompt = rng.choice(makers)(rng, functions)
        if prompt not in seen:
            seen.add(prompt)
            requests.append(PromptRow(f"gen-{len(requests):05d}", kind, prompt))
    return requests


@dataclass(frozen=True)
class _Function:
    name: str
    doc: str  # the docstring's first sentence
    code: str  # the source, when short enough to quote


def _code(rng: random.Random, functions: list[_Function]) -> tuple[str, str]:
    f = rng.choice(functions)
    return "code", rng.choice(CODE).format(lang=rng.choice(LANGUAGES), name=f.name, doc=f.doc)


def _snippet(rng: random.Random, functions: list[_Function]) -> tuple[str, str]:
    f = rng.choice([f for f in functions if f.code] or functions)
    kind, template = rng.choice(SNIPPET)
    names = sorted({n.id for n in ast.walk(ast.parse(f.code)) if isinstance(n, ast.Name)}) or ["x"]
    var = rng.choice(names)
    return kind, template.format(code=f.code or f"def {f.name}(): ...", var=var, new=f"{var}_value")


def _chat(rng: random.Random, functions: list[_Function]) -> tuple[str, str]:
    kind, template = rng.choice(CHAT)
    return kind, template.format(topic=rng.choice(TOPICS), task=rng.choice(TASKS), concept=rng.choice(CONCEPTS),
                                 doc=rng.choice(functions).doc, audience=rng.choice(AUDIENCES),
                                 length=rng.choice(LENGTHS), n=rng.choice(("two", "three", "four", "five")))


def _math(rng: random.Random, functions: list[_Function]) -> tuple[str, str]:
    return "math", rng.choice(MATH).format(a=rng.randint(2, 400), b=rng.randint(2, 40), c=rng.randint(2, 900))


def _stdlib_functions(rng: random.Random, files: int = 300) -> list[_Function]:
    """Public top-level functions with a docstring, from a seeded sample of stdlib modules."""
    root = Path(sysconfig.get_paths()["stdlib"])
    paths = sorted(p for p in root.glob("*.py") if not p.name.startswith("_"))
    paths += sorted(p for p in root.glob("*/*.py") if "test" not in p.parts[-2] and not p.name.startswith("_")
                    and p.parts[-2] not in {"site-packages", "dist-packages"})
    found = []
    for path in rng.sample(paths, min(files, len(paths))):
        try:
            source = path.read_text(encoding="utf-8")
            tree = ast.parse(source)
        except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
            continue
        lines = source.splitlines()
        for node in tree.body:
            if not isinstance(node, ast.FunctionDef) or node.name.startswith("_"):
                continue
            doc = (ast.get_docstring(node) or "").strip().split("\n\n")[0].replace("\n", " ")
            if not 20 <= len(doc) <= 300:
                continue
            sentence = doc if doc.endswith(".") else doc + "."
            body = lines[node.lineno - 1 : node.end_lineno]
            code = "\n".join(body) if len(body) <= MAX_SNIPPET_LINES else ""
            found.append(_Function(node.name, sentence, code))
    return found
