from django.contrib import admin
from django.contrib.auth.decorators import login_required
from django.urls import include, path
from django.views.generic import TemplateView
from drf_spectacular.views import SpectacularAPIView

urlpatterns = [
    path("", TemplateView.as_view(template_name="pages/home.html"), name="home"),
    path("support/", login_required(TemplateView.as_view(template_name="pages/support.html")), name="support"),
    path("admin/", admin.site.urls),
    path("accounts/", include("allauth.urls")),
    # The shop's API: its own endpoints, its schema, and Helix's chat under the API's prefix.
    path("api/users/", include("shop.users.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/helix/", include("chat.urls")),
]
