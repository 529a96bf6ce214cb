"""The chat's side list of saved conversations: search, open, start a new one, rename in place, delete."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.gui.chat.chat_store import ChatSaveError, ChatStore
from app.gui.common import quit_dialogs

CONVERSATION_ID_ROLE = Qt.ItemDataRole.UserRole + 1


class ChatSidebar(QWidget):
    """Lists the store's conversations, newest first; edits go straight to the store, and one it refuses is undone
    in the list and told through `sig_save_failed`."""

    sig_conversation_opened = Signal(int)
    sig_new_requested = Signal()
    sig_conversation_deleted = Signal(int)
    sig_save_failed = Signal(str)  # why a rename or a delete did not happen, in words for the user

    def __init__(self, store: ChatStore, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._store = store
        self._current: int | None = None
        self._filling = False  # set while the list is refilled: its item changes are not renames
        self.search_edit = QLineEdit()
        self.search_edit.setPlaceholderText("Search chats")
        self.search_edit.setAccessibleName("Search conversations")
        self.search_edit.setClearButtonEnabled(True)
        self.list_widget = QListWidget()
        self.list_widget.setAccessibleName("Conversations")
        self.list_widget.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.list_widget.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list_widget.setEditTriggers(
            QAbstractItemView.EditTrigger.EditKeyPressed | QAbstractItemView.EditTrigger.DoubleClicked
        )
        self.new_button = QPushButton("&New chat")
        self.new_button.setAccessibleName("Start a new conversation")
        self.rename_button = QPushButton("Rename")
        self.rename_button.setAccessibleName("Rename the selected conversation")
        self.delete_button = QPushButton("Delete")
        self.delete_button.setAccessibleName("Delete the selected conversation")
        buttons = QHBoxLayout()
        buttons.addWidget(self.rename_button)
        buttons.addWidget(self.delete_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.new_button)
        layout.addWidget(self.search_edit)
        layout.addWidget(self.list_widget, 1)
        layout.addLayout(buttons)
        self.search_edit.textChanged.connect(self.refresh)
        self.list_widget.itemActivated.connect(self._on_list_widget_item_activated)
        self.list_widget.itemClicked.connect(self._on_list_widget_item_activated)
        self.list_widget.itemChanged.connect(self._on_list_widget_item_changed)
        self.list_widget.currentItemChanged.connect(self._on_list_widget_current_item_changed)
        self.new_button.clicked.connect(self.sig_new_requested)
        self.rename_button.clicked.connect(self._on_rename_button_clicked)
        self.delete_button.clicked.connect(self._on_delete_button_clicked)

    def refresh(self) -> None:
        """Fill the list from the store, filtered by the search text."""
        self._filling = True
        try:
            self.list_widget.clear()
            for conversation in self._store.conversations(self.search_edit.text()):
                item = QListWidgetItem(conversation.title)
                item.setData(CONVERSATION_ID_ROLE, conversation.id)
                item.setToolTip(conversation.title)
                item.setFlags(item.flags() | Qt.ItemFlag.ItemIsEditable)
                self.list_widget.addItem(item)
                if conversation.id == self._current:
                    self.list_widget.setCurrentItem(item)
        finally:
            self._filling = False
        self._update_buttons()

    def show_current(self, conversation_id: int | None) -> None:
        self._current = conversation_id
        self.refresh()

    def titles(self) -> list[str]:
        return [self.list_widget.item(row).text() for row in range(self.list_widget.count())]

    def rename(self, conversation_id: int, title: str) -> None:
        self._rename(conversation_id, title)
        self.refresh()

    def _rename(self, conversation_id: int, title: str) -> str | None:
        """The title the conversation now has; None when the store refused the change."""
        try:
            return self._store.rename(conversation_id, title)
        except ChatSaveError as error:
            self.sig_save_failed.emit(f"{error}; the conversation keeps its name")
            return None

    def delete(self, conversation_id: int) -> None:
        try:
            self._store.delete(conversation_id)
        except ChatSaveError as error:
            self.sig_save_failed.emit(f"{error}; the conversation is not deleted")
            return
        if conversation_id == self._current:
            self._current = None
        self.refresh()
        self.sig_conversation_deleted.emit(conversation_id)

    def _selected_id(self) -> int | None:
        item = self.list_widget.currentItem()
        return int(item.data(CONVERSATION_ID_ROLE)) if item is not None else None

    def _update_buttons(self) -> None:
        selected = self._selected_id() is not None
        self.rename_button.setEnabled(selected)
        self.delete_button.setEnabled(selected)

    @Slot(QListWidgetItem)
    def _on_list_widget_item_activated(self, item: QListWidgetItem) -> None:
        self.sig_conversation_opened.emit(int(item.data(CONVERSATION_ID_ROLE)))

    @Slot(QListWidgetItem)
    def _on_list_widget_item_changed(self, item: QListWidgetItem) -> None:
        if not self._filling:
            # The tooltip holds the saved title: what the item shows again when the store refuses the new one.
            title = self._rename(int(item.data(CONVERSATION_ID_ROLE)), item.text()) or item.toolTip()
            self._filling = True
            item.setText(title)
            item.setToolTip(title)
            self._filling = False

    @Slot()
    def _on_list_widget_current_item_changed(self) -> None:
        self._update_buttons()

    @Slot()
    def _on_rename_button_clicked(self) -> None:
        item = self.list_widget.currentItem()
        if item is not None:
            self.list_widget.editItem(item)

    @Slot()
    def _on_delete_button_clicked(self) -> None:
        item = self.list_widget.currentItem()
        if item is None:
            return
        if quit_dialogs.ask_confirmation(self, "Delete conversation", f"Delete \u201c{item.text()}\u201d for good?"):
            self.delete(int(item.data(CONVERSATION_ID_ROLE)))
