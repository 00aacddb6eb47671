"""Fixtures of the review tests: users with and without the reviewer role, hack kernel sources.

The model factories (make_task, make_kernel, make_evaluation, …) come from tests/webapp/conftest.py.
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, Permission

from webapp.accounts.services import api_token_create


def reviewer_group() -> Group:
    group, _ = Group.objects.get_or_create(name="Reviewer")  # a flush (transactional tests) drops it
    group.permissions.add(Permission.objects.get(content_type__app_label="review", codename="decide"))
    return group


@pytest.fixture
def make_user(django_user_model):
    def make(username: str, *, reviewer: bool = False):
        user = django_user_model.objects.create_user(username=username, password="pw")
        if reviewer:
            user.groups.add(reviewer_group())
        return django_user_model.objects.get(pk=user.pk)  # no stale permission cache

    return make


@pytest.fixture
def reviewers(make_user):
    return make_user("rita", reviewer=True), make_user("rob", reviewer=True)


@pytest.fixture
def member(make_user):
    return make_user("mona")


@pytest.fixture
def token_of():
    def token(user) -> str:
        return api_token_create(user=user, name="tests")[1]

    return token
