"""A site that gives Helix's views classes of its own: a subclass's, and ``as_view()``'s
(permissions, versioning)."""

from django.urls import path
from rest_framework import exceptions
from rest_framework.authentication import SessionAuthentication
from rest_framework.permissions import IsAdminUser
from rest_framework.versioning import AcceptHeaderVersioning

from chat.http import views


class StaffSnapshotView(views.SnapshotView):
    permission_classes = [IsAdminUser]


class Versions(AcceptHeaderVersioning):
    allowed_versions = ["1.0"]


class OfficeHoursAuthentication(SessionAuthentication):
    """A site's authenticator that refuses a signed-in user with ``PermissionDenied`` of its own."""

    def authenticate(self, request):  # type: ignore[no-untyped-def]
        found = super().authenticate(request)
        if found is not None and request.headers.get("X-After-Hours"):
            raise exceptions.PermissionDenied("Chat is closed after hours")
        return found


urlpatterns = [
    path("office/agents", views.AgentsView.as_view(authentication_classes=[OfficeHoursAuthentication])),
    path("versioned/agents", views.AgentsView.as_view(versioning_class=Versions)),
    path("staff/chat/<str:session_id>/snapshot", StaffSnapshotView.as_view()),
    path("staff/agents", views.AgentsView.as_view(permission_classes=[IsAdminUser])),
    path("api/agents", views.AgentsView.as_view()),
]
