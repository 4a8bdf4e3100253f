"""A site that gives Helix's views classes of its own: a subclass's, and ``as_view()``'s
(permissions, versioning)."""

from django.urls import path
from rest_framework.permissions import IsAdminUser
from rest_framework.versioning import AcceptHeaderVersioning

from chat.http import views


class StaffSnapshotView(views.SnapshotView):
    permission_classes = [IsAdminUser]


class Versions(AcceptHeaderVersioning):
    allowed_versions = ["1.0"]


urlpatterns = [
    path("versioned/agents", views.AgentsView.as_view(versioning_class=Versions)),
    path("staff/chat/<str:session_id>/snapshot", StaffSnapshotView.as_view()),
    path("staff/agents", views.AgentsView.as_view(permission_classes=[IsAdminUser])),
    path("api/agents", views.AgentsView.as_view()),
]
