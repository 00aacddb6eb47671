from django import template
from django.conf import settings
from django.shortcuts import resolve_url

register = template.Library()


@register.simple_tag
def login_url() -> str:
    return resolve_url(settings.LOGIN_URL)
