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
# Requests as people type them: a task in plain words, not a docstring (the bench's own
# kind of prompt, which the docstring templates alone trained the head badly for).
TASKS_IN_WORDS = (
    "checks whether a string is a palindrome", "counts the words in a text file",
    "flattens a nested list", "groups a list of records by a key", "parses a date string in ISO format",
    "validates an email address with a regular expression", "computes the median of a list of numbers",
    "converts a Roman numeral to an integer", "finds the longest common prefix of a list of strings",
    "checks whether two strings are anagrams", "rotates a matrix by 90 degrees", "implements binary search",
    "reads a CSV file and returns the rows as dictionaries", "retries a function call with exponential backoff",
    "chunks a list into pieces of a given size", "converts a temperature from Celsius to Fahrenheit",
    "counts how often each character appears in a string", "checks whether brackets in a string are balanced",
    "returns the n largest values of a list", "builds a URL query string from a dictionary",
    "computes the factorial of a number iteratively", "implements a stack with push, pop and peek",
    "implements a queue using two stacks", "transposes a matrix", "converts a camelCase name to snake_case",
    "finds all files with a given extension in a folder", "measures how long a function takes to run",
    "merges two sorted lists into one sorted list", "computes the greatest common divisor of two numbers",
    "shuffles a list in place", "checks whether a year is a leap year", "truncates a string to a length with an ellipsis",
    "finds the first non-repeating character in a string", "computes a running average of a stream of numbers",
    "implements a simple rate limiter", "parses command-line arguments for an input and an output path",
    "pretty-prints a JSON file", "sums the digits of an integer", "converts bytes to a human-readable size",
    "checks whether a number is a power of two", "implements depth-first search on a graph",
    "implements breadth-first search on a grid", "validates a password against a few rules",
    "computes the Levenshtein distance between two strings", "splits a full name into first and last names",
)
TASK_PHRASES = (
    "Write a {lang} function that {task}.", "Can you write {lang} code that {task}?",
    "I need a {lang} function that {task}. Include a short example.",
    "Write a small {lang} program that {task}, with comments.", "Show me a {lang} snippet that {task}.",
)
HOW_TO = (
    "undo my last git commit but keep the changes", "read a JSON file in Python", "center a div with CSS",
    "make an HTTP request in Go", "copy a file in Rust", "sort a dictionary by value in Python",
    "find which process is using a port on Linux", "create a virtual environment in Python",
    "write a for loop in bash", "handle a missing key in a Python dict", "format a date in JavaScript",
    "read a file line by line in Java", "squash the last three commits in git", "profile a slow Python function",
    "read environment variables in Node.js", "write a unit test in Go", "split a string by a delimiter in C",
)
SNIPPET_ASKS = (
    ("edit", "Make this function handle None input, and return the full code:\n\n```python\n{code}\n```"),
    ("edit", "Translate this Python function to {lang}:\n\n```python\n{code}\n```"),
    ("edit", "Add error handling to this function and return the updated code:\n\n```python\n{code}\n```"),
    ("explain", "Can you explain this code to me in simple terms?\n\n```python\n{code}\n```"),
    ("explain", "Review this code and suggest two improvements:\n\n```python\n{code}\n```"),
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
    makers = (_code, _task, _task, _snippet, _snippet, _ask, _chat, _chat, _how_to, _summary, _math)
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
    module_doc: str = ""  # its module's documentation, when a paragraph or more


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


def _task(rng: random.Random, functions: list[_Function]) -> tuple[str, str]:
    return "code", rng.choice(TASK_PHRASES).format(lang=rng.choice(LANGUAGES), task=rng.choice(TASKS_IN_WORDS))


def _ask(rng: random.Random, functions: list[_Function]) -> tuple[str, str]:
    f = rng.choice([f for f in functions if f.code] or functions)
    kind, template = rng.choice(SNIPPET_ASKS)
    return kind, template.format(code=f.code or f"def {f.name}(): ...", lang=rng.choice(LANGUAGES[3:]))


def _how_to(rng: random.Random, functions: list[_Function]) -> tuple[str, str]:
    return "chat", rng.choice(("How do I {}?", "What's the simplest way to {}?", "how to {}")).format(
        rng.choice(HOW_TO))


def _summary(rng: random.Random, functions: list[_Function]) -> tuple[str, str]:
    """A real paragraph to summarize: a module's own documentation, longer than a docstring's first line."""
    docs = [f.module_doc for f in functions if f.module_doc] or [f.doc for f in functions]
    template = rng.choice(("Summarize in {n} sentences: {doc}", "TL;DR this for me: {doc}",
                           "Explain this in plain words: {doc}"))
    return "summarize", template.format(n=rng.choice(("two", "three")), doc=rng.choice(docs))


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
        module_doc = " ".join((ast.get_docstring(tree) or "").split())
        module_doc = module_doc if 200 <= len(module_doc) <= 1200 else ""
        for node in tree.body:
            if not isinstance(node, ast.FunctionDef) or node.name.startswith("_"):
                continue
            doc = (ast.get_docstring(node) or "").strip().split("\n\n")[0].replace("\n", " ")
            if not 20 <= len(doc) <= 300:
                continue
            sentence = doc if doc.endswith(".") else doc + "."
            body = lines[node.lineno - 1 : node.end_lineno]
            code = "\n".join(body) if len(body) <= MAX_SNIPPET_LINES else ""
            found.append(_Function(node.name, sentence, code, module_doc))
    return found
