"""The Reviewer group, holding review.decide (permissions are otherwise made only after migrate)."""

from django.db import migrations


def create_group(apps, schema_editor):
    ContentType = apps.get_model("contenttypes", "ContentType")
    Permission = apps.get_model("auth", "Permission")
    Group = apps.get_model("auth", "Group")
    content_type, _ = ContentType.objects.get_or_create(app_label="review", model="reviewcase")
    permission, _ = Permission.objects.get_or_create(
        content_type=content_type,
        codename="decide",
        defaults={"name": "Can give review verdicts and publish reviewer rules"},
    )
    group, _ = Group.objects.get_or_create(name="Reviewer")
    group.permissions.add(permission)


def remove_group(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name="Reviewer").delete()


class Migration(migrations.Migration):
    dependencies = [
        ("review", "0001_initial"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [migrations.RunPython(create_group, remove_group)]
