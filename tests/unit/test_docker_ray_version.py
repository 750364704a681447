"""A node's claimed Ray version is written into Ray's version module as a literal, never as code."""
import ast

from rlsim.ray_internals.launch import version_source as ray_version_source

SOURCE = 'version = "2.9.0"\ncommit = "abc"\n'


def test_claimed_version_replaces_the_real_one():
    out = ray_version_source(SOURCE, "2.9.0", "2.8.1")
    assert 'version = "2.8.1"' in out.replace("'", '"')


def test_a_version_string_cannot_become_code():
    hostile = '1"; import os; os.system("id"); x = "'
    tree = ast.parse(ray_version_source(SOURCE, "2.9.0", hostile))
    assert [type(n).__name__ for n in tree.body] == ["Assign", "Assign"]
    assert tree.body[0].value.value == hostile
